"""The fault ledger in an append-only JSON-lines file: the ``FaultLedger`` port until the SQL store lands.

One event per line (``run_started``, ``run_finished``, ``planned``, ``removed``), each flushed and fsynced
before the call returns: a ``planned`` must be on disk before the toxic it names is created. Several
processes (two CLIs) may share the file, so every append and read holds an ``flock`` on a sibling lock file
(not the data file: compaction replaces the data file, and a lock on the replaced inode would protect
nothing). What a crash leaves behind, a torn last line, is skipped with a warning, as is any corrupt line.

A run's owner is its process: host name, pid, the pid's start time (so a reused pid is not taken for the
original) and the kernel's boot id (so a pid from before a reboot is not either).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from cliffwatch.domain.ports import LedgerEntry

log = structlog.get_logger(__name__)

EVENTS = ("run_started", "run_finished", "planned", "removed")


@dataclass(frozen=True, kw_only=True)
class Owner:
    """The process that runs a run; ``start_time`` and ``boot_id`` are None where /proc does not tell."""

    host: str
    pid: int
    start_time: int | None  # field 22 of /proc/<pid>/stat: clock ticks after boot
    boot_id: str | None

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        stat = _proc_stat(pid)
        return cls(host=socket.gethostname(), pid=pid, start_time=stat[1] if stat else None, boot_id=_boot_id())

    def alive(self) -> bool:
        """Whether this owner may still be running. Another host's process cannot be checked from here, so
        it counts as alive: never remove another machine's live faults."""
        here = Owner.current()
        if self.host != here.host:
            return True
        if self.boot_id and here.boot_id and self.boot_id != here.boot_id:
            return False  # the machine rebooted since: every process of that boot is gone
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # exists, but belongs to another user
        stat = _proc_stat(self.pid)
        if stat is None:
            return True  # no /proc (or it just exited): the pid check is all we have
        state, start_time = stat
        if state in ("Z", "X"):
            return False  # exited, not yet reaped: it manages nothing any more
        return self.start_time is None or start_time == self.start_time


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of ``pid`` from /proc, or None when it cannot be read."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces and ')': split after the
    # last one. What follows starts at field 3 (state); field 22 (starttime) is then the 20th.
    fields = text.rpartition(")")[2].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


@dataclass(frozen=True, kw_only=True)
class _Event:
    kind: str
    run_id: str
    entry: LedgerEntry | None  # planned, removed
    owner: Owner | None  # run_started
    line: bytes  # verbatim, newline included: compaction copies it unchanged


@dataclass(kw_only=True)
class _Run:
    owner: Owner | None = None
    finished: bool = False


@dataclass(frozen=True, kw_only=True)
class _State:
    runs: dict[str, _Run]
    outstanding: dict[tuple[str, tuple[str, str, str | None]], LedgerEntry]  # insertion order: oldest first

    def is_running(self, run_id: str) -> bool:
        run = self.runs.get(run_id)
        return run is not None and not run.finished and run.owner is not None and run.owner.alive()


class FileFaultLedger:
    """Implements ``FaultLedger`` on one JSON-lines file (its parent directories are created as needed)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self._dir_synced = False

    async def run_started(self, run_id: str) -> None:
        owner = Owner.current()
        await self._write({"event": "run_started", "run_id": run_id, "owner": _owner_json(owner)})

    async def run_finished(self, run_id: str) -> None:
        await self._write({"event": "run_finished", "run_id": run_id})

    async def planned(self, entry: LedgerEntry) -> None:
        await self._write({"event": "planned", **_entry_json(entry)})

    async def removed(self, entry: LedgerEntry) -> None:
        await self._write({"event": "removed", **_entry_json(entry)})

    async def outstanding(self) -> list[LedgerEntry]:
        state = await asyncio.to_thread(self._state)
        return list(state.outstanding.values())

    async def is_running(self, run_id: str) -> bool:
        return await asyncio.to_thread(lambda: self._state().is_running(run_id))

    async def compact(self) -> None:
        """Rewrites the file without the runs that are settled (finished or dead, nothing outstanding);
        atomically: a crash leaves the old file or the new one, never a mixture."""
        await asyncio.to_thread(self._compact)

    async def _write(self, record: dict[str, Any]) -> None:
        record["at"] = datetime.now(UTC).isoformat(timespec="milliseconds")
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        await asyncio.to_thread(self._append, line)

    @contextlib.contextmanager
    def _locked(self, operation: int) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, operation)  # released when the descriptor is closed
            yield
        finally:
            os.close(fd)

    def _append(self, line: bytes) -> None:
        with self._locked(fcntl.LOCK_EX):
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # a crash tore the last line: end it, or this one is glued to it
                _write_all(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            if not self._dir_synced:
                _fsync_dir(self.path.parent)  # the file's own existence must survive a crash too
                self._dir_synced = True

    def _events(self) -> list[_Event]:
        if not self.path.exists():
            return []  # nothing recorded yet: no need to create the state directory just to read it
        try:
            with self._locked(fcntl.LOCK_SH):
                data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return self._parse_all(data)

    def _parse_all(self, data: bytes) -> list[_Event]:
        events: list[_Event] = []
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            if number == len(lines):  # no newline after it: the write was cut short by a crash
                log.warning("torn last fault ledger line skipped", path=str(self.path), line=number)
                continue
            try:
                events.append(_parse(raw + b"\n"))
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("unreadable fault ledger line skipped", path=str(self.path), line=number, reason=str(exc))
        return events

    def _state(self, events: list[_Event] | None = None) -> _State:
        runs: dict[str, _Run] = {}
        outstanding: dict[tuple[str, tuple[str, str, str | None]], LedgerEntry] = {}
        for event in self._events() if events is None else events:
            if event.kind == "run_started":
                runs[event.run_id] = _Run(owner=event.owner)  # a restarted run id takes its latest owner
            elif event.kind == "run_finished":
                runs.setdefault(event.run_id, _Run()).finished = True
            elif event.entry is not None:
                key = (event.run_id, event.entry.key)
                if event.kind == "planned":
                    outstanding[key] = event.entry  # planned again while outstanding keeps its place
                else:
                    outstanding.pop(key, None)
        return _State(runs=runs, outstanding=outstanding)

    def _compact(self) -> None:
        if not self.path.exists():
            return
        with self._locked(fcntl.LOCK_EX):
            try:
                events = self._parse_all(self.path.read_bytes())
            except FileNotFoundError:
                return
            state = self._state(events)
            keep = {run_id for run_id, _ in state.outstanding} | {r for r in state.runs if state.is_running(r)}
            kept = b"".join(e.line for e in events if e.run_id in keep)
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
            try:
                try:
                    _write_all(fd, kept)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(temp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise
            _fsync_dir(self.path.parent)  # makes the rename itself durable


def _owner_json(owner: Owner) -> dict[str, Any]:
    return {"host": owner.host, "pid": owner.pid, "start_time": owner.start_time, "boot_id": owner.boot_id}


def _entry_json(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "run_id": entry.run_id,
        "server": entry.server,
        "proxy": entry.proxy,
        "toxic": entry.toxic,
        "managed": entry.managed,
    }


def _parse(line: bytes) -> _Event:
    """One event from its line; raises ValueError (or TypeError, KeyError) when it is not one."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    kind = data["event"]
    if kind not in EVENTS:
        raise ValueError(f"unknown event {kind!r}")
    run_id = _typed(data, "run_id", str)
    entry = owner = None
    if kind == "run_started":
        raw = data["owner"]
        if not isinstance(raw, dict):
            raise ValueError("owner is not an object")
        owner = Owner(
            host=_typed(raw, "host", str),
            pid=_typed(raw, "pid", int),
            start_time=_typed(raw, "start_time", int, optional=True),
            boot_id=_typed(raw, "boot_id", str, optional=True),
        )
    elif kind in ("planned", "removed"):
        entry = LedgerEntry(
            run_id=run_id,
            server=_typed(data, "server", str),
            proxy=_typed(data, "proxy", str),
            toxic=_typed(data, "toxic", str, optional=True),
            managed=_typed(data, "managed", bool),
        )
    return _Event(kind=kind, run_id=run_id, entry=entry, owner=owner, line=line)


def _typed(data: dict[str, Any], key: str, kind: type[Any], *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    # bool is an int to isinstance: a pid of true is as wrong as a pid of "1"
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{key} must be {kind.__name__}, got {value!r}")
    return value


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
