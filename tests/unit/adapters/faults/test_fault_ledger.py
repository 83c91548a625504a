"""The file fault ledger: durable before it returns, shared safely between processes, tolerant of what a
crash leaves behind, and sure of whether a run's owner is still the process that started it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

import cliffwatch
from cliffwatch.adapters.faults import fault_ledger
from cliffwatch.adapters.faults.fault_ledger import FileFaultLedger, Owner
from cliffwatch.domain.ports import LedgerEntry

SERVER = "http://127.0.0.1:8474"
SRC = str(Path(cliffwatch.__file__).parents[1])
HAS_PROC = Path(f"/proc/{os.getpid()}/stat").exists()
needs_proc = pytest.mark.skipif(not HAS_PROC, reason="process start times come from /proc")

# A separate process appending to the ledger: argv is path, run id, number of toxics, whether to finish.
APPENDER = """
import asyncio, sys
from pathlib import Path
from cliffwatch.adapters.faults.fault_ledger import FileFaultLedger
from cliffwatch.domain.ports import LedgerEntry

async def main() -> None:
    ledger = FileFaultLedger(Path(sys.argv[1]))
    run_id, count, finish = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "finish"
    await ledger.run_started(run_id)
    for i in range(count):
        await ledger.planned(LedgerEntry(run_id=run_id, server="http://127.0.0.1:8474", proxy="llm", toxic=f"t{i}"))
    if finish:
        await ledger.run_finished(run_id)

asyncio.run(main())
"""


def _toxic(run_id: str, name: str, *, proxy: str = "llm", managed: bool = False) -> LedgerEntry:
    return LedgerEntry(run_id=run_id, server=SERVER, proxy=proxy, toxic=name, managed=managed)


def _appender(path: Path, run_id: str, count: int, *, finish: bool = False) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": SRC}
    args = [sys.executable, "-c", APPENDER, str(path), run_id, str(count), "finish" if finish else "stay"]
    return subprocess.Popen(args, env=env)


def _write_started(path: Path, run_id: str, owner: Owner) -> None:
    """Appends a run_started line exactly as the owner's own process would have written it."""
    line = {"event": "run_started", "run_id": run_id, "owner": asdict(owner), "at": "2025-01-01T00:00:00+00:00"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as file:
        file.write(json.dumps(line) + "\n")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _proc_stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (state) on: field 22, the start time, is at index 19."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _exited_unreaped_child() -> subprocess.Popen[bytes]:
    """A child process that has exited and is not yet waited for: a zombie, still holding its pid."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while _proc_stat_fields(child.pid)[0] != "Z":
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            pytest.fail("the child did not exit")
        time.sleep(0.01)
    return child


class Warnings:
    """Stands in for the module's structlog logger, keeping what it warned about."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> Warnings:
    recorder = Warnings()
    monkeypatch.setattr(fault_ledger, "log", recorder)
    return recorder


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "cliffwatch" / "faults.jsonl"


async def test_a_second_ledger_on_the_same_file_sees_what_the_first_wrote(path: Path) -> None:
    """Every event is in the file when the call returns: a fresh ledger (another process) reads it back."""
    first = FileFaultLedger(path)
    await first.run_started("r1")
    await first.planned(LedgerEntry(run_id="r1", server=SERVER, proxy="llm", managed=True))
    await first.planned(_toxic("r1", "cliffwatch-r1-p1-0-latency", managed=True))
    second = FileFaultLedger(path)
    assert await second.outstanding() == [
        LedgerEntry(run_id="r1", server=SERVER, proxy="llm", toxic=None, managed=True),
        _toxic("r1", "cliffwatch-r1-p1-0-latency", managed=True),
    ]
    assert await second.is_running("r1")
    lines = _lines(path)
    assert [line["event"] for line in lines] == ["run_started", "planned", "planned"]
    assert lines[0]["owner"]["pid"] == os.getpid()
    assert {k: lines[2][k] for k in ("run_id", "server", "proxy", "toxic", "managed")} == {
        "run_id": "r1",
        "server": SERVER,
        "proxy": "llm",
        "toxic": "cliffwatch-r1-p1-0-latency",
        "managed": True,
    }
    assert all("at" in line for line in lines)


async def test_each_event_is_fsynced_before_the_call_returns(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planned entry has been fsynced on the ledger file itself, not only written, when planned() returns."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if HAS_PROC else "?")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    ledger = FileFaultLedger(path)
    await ledger.planned(_toxic("r1", "a"))
    synced_before = list(synced)
    await ledger.planned(_toxic("r1", "b"))
    if HAS_PROC:
        assert str(path) in synced_before
        assert synced[len(synced_before) :] == [str(path)]  # the parent directory only once, on creation
    else:
        assert len(synced) > len(synced_before)


async def test_the_file_is_private_state_in_created_directories(path: Path) -> None:
    """The parent directories are created, and the ledger and its lock are readable by their owner only."""
    await FileFaultLedger(path).run_started("r1")
    assert _mode(path) == 0o600
    assert _mode(path.with_name("faults.jsonl.lock")) == 0o600


async def test_reading_a_ledger_that_does_not_exist_creates_nothing(path: Path) -> None:
    """Before anything is recorded there is nothing outstanding, and a read does not create the state dir."""
    ledger = FileFaultLedger(path)
    assert await ledger.outstanding() == []
    assert not await ledger.is_running("r1")
    await ledger.compact()
    assert not path.parent.exists()


async def test_a_removal_settles_only_the_same_entry_of_the_same_run(path: Path) -> None:
    """Removed matches planned by server, proxy, toxic and run; the rest stay outstanding, oldest first."""
    ledger = FileFaultLedger(path)
    await ledger.planned(_toxic("r1", "x"))
    await ledger.planned(_toxic("r2", "x"))
    await ledger.planned(_toxic("r1", "x", proxy="db"))
    await ledger.planned(_toxic("r1", "y"))
    await ledger.removed(_toxic("r1", "x"))
    assert await ledger.outstanding() == [_toxic("r2", "x"), _toxic("r1", "x", proxy="db"), _toxic("r1", "y")]
    await ledger.planned(_toxic("r1", "x"))  # planned again after its removal: outstanding again, now newest
    await ledger.removed(_toxic("r1", "nothing-planned"))  # a removal of nothing changes nothing
    assert [(e.run_id, e.proxy, e.toxic) for e in await ledger.outstanding()] == [
        ("r2", "llm", "x"),
        ("r1", "db", "x"),
        ("r1", "llm", "y"),
        ("r1", "llm", "x"),
    ]


async def test_a_torn_last_line_is_skipped_and_the_next_append_is_not_glued_to_it(
    path: Path, warnings: Warnings
) -> None:
    """A crash mid-write leaves half a line: it is skipped with a warning, and what is written next reads."""
    ledger = FileFaultLedger(path)
    await ledger.planned(_toxic("r1", "a"))
    with path.open("a") as file:
        file.write('{"event": "planned", "run_id": "r1", "server": "http://127.0.0.1:8474", "pro')
    assert await ledger.outstanding() == [_toxic("r1", "a")]
    assert [event for event, _ in warnings.events] == ["torn last fault ledger line skipped"]
    await ledger.planned(_toxic("r1", "b"))
    assert await ledger.outstanding() == [_toxic("r1", "a"), _toxic("r1", "b")]


@pytest.mark.parametrize(
    "bad",
    [
        "not json at all",
        '["a list"]',
        '{"event": "exploded", "run_id": "r1"}',
        '{"event": "planned", "run_id": "r1", "server": "s", "proxy": "p", "toxic": 3, "managed": false}',
        '{"event": "run_started", "run_id": "r1", "owner": {"host": "h", "pid": true}}',
        '{"event": "removed", "run_id": "r1"}',
    ],
)
async def test_a_corrupt_line_anywhere_is_skipped_with_a_warning(path: Path, warnings: Warnings, bad: str) -> None:
    """A line that is not an event is reported with its line number; the lines around it still count."""
    ledger = FileFaultLedger(path)
    await ledger.planned(_toxic("r1", "a"))
    with path.open("a") as file:
        file.write(bad + "\n")
    await ledger.planned(_toxic("r1", "b"))
    assert await ledger.outstanding() == [_toxic("r1", "a"), _toxic("r1", "b")]
    assert [(event, fields["line"]) for event, fields in warnings.events] == [
        ("unreadable fault ledger line skipped", 2)
    ]


async def test_two_processes_appending_at_once_lose_no_line(path: Path) -> None:
    """Appends from two processes interleave whole lines: every entry of both is there and readable."""
    count = 150
    workers = [_appender(path, "left", count), _appender(path, "right", count)]
    assert [worker.wait(timeout=30) for worker in workers] == [0, 0]
    outstanding = await FileFaultLedger(path).outstanding()
    assert sorted((e.run_id, e.toxic) for e in outstanding) == sorted(
        (run, f"t{i}") for run in ("left", "right") for i in range(count)
    )
    assert len(_lines(path)) == 2 * (count + 1)


async def test_a_run_is_running_until_it_finishes(path: Path) -> None:
    """Started in this process it is running; finished it is not; never started it is not either."""
    ledger = FileFaultLedger(path)
    await ledger.run_started("r1")
    assert await ledger.is_running("r1")
    assert not await ledger.is_running("never-started")
    await ledger.run_finished("r1")
    assert not await ledger.is_running("r1")


async def test_a_run_whose_process_exited_is_not_running(path: Path) -> None:
    """A run started by a process that has since exited (without finishing it) is dead, its entries kept."""
    assert _appender(path, "crashed", 2).wait(timeout=30) == 0
    ledger = FileFaultLedger(path)
    assert not await ledger.is_running("crashed")
    assert [e.toxic for e in await ledger.outstanding()] == ["t0", "t1"]


@needs_proc
async def test_a_reused_pid_is_not_the_original_owner(path: Path) -> None:
    """Our own pid with another start time is a process that had this pid before: not running."""
    me = Owner.current()
    assert me.start_time is not None
    _write_started(path, "ours", me)
    _write_started(path, "before-reuse", replace(me, start_time=me.start_time - 1))
    ledger = FileFaultLedger(path)
    assert await ledger.is_running("ours")
    assert not await ledger.is_running("before-reuse")


@needs_proc
async def test_a_run_from_before_a_reboot_is_not_running(path: Path) -> None:
    """The same host, pid and start time under another boot id is a process of an earlier boot."""
    _write_started(path, "last-boot", replace(Owner.current(), boot_id="00000000-0000-0000-0000-000000000000"))
    assert not await FileFaultLedger(path).is_running("last-boot")


@needs_proc
async def test_an_exited_but_unreaped_owner_is_not_running(path: Path) -> None:
    """A zombie still holds its pid and start time, but it manages nothing any more."""
    child = _exited_unreaped_child()
    try:
        start_time = int(_proc_stat_fields(child.pid)[19])
        _write_started(path, "zombie", replace(Owner.current(), pid=child.pid, start_time=start_time))
        assert not await FileFaultLedger(path).is_running("zombie")
    finally:
        child.wait()


async def test_another_hosts_run_counts_as_running(path: Path) -> None:
    """A run owned elsewhere cannot be checked from here, so it is taken as running, whatever its pid."""
    _write_started(path, "elsewhere", Owner(host="some-other-host", pid=1, start_time=1, boot_id="x"))
    assert await FileFaultLedger(path).is_running("elsewhere")


async def test_compaction_drops_settled_runs_and_keeps_the_rest(path: Path) -> None:
    """Finished and dead runs with nothing outstanding go; outstanding entries and running runs stay, and
    the ledger answers exactly as before."""
    assert _appender(path, "dead-clean", 0).wait(timeout=30) == 0
    assert _appender(path, "dead-leftover", 1).wait(timeout=30) == 0
    ledger = FileFaultLedger(path)
    await ledger.run_started("finished-clean")
    await ledger.planned(_toxic("finished-clean", "a"))
    await ledger.removed(_toxic("finished-clean", "a"))
    await ledger.run_finished("finished-clean")
    await ledger.run_started("finished-leftover")
    await ledger.planned(_toxic("finished-leftover", "b"))
    await ledger.run_finished("finished-leftover")
    await ledger.run_started("running")
    runs = ["dead-clean", "dead-leftover", "finished-clean", "finished-leftover", "running"]
    before = (await ledger.outstanding(), [await ledger.is_running(r) for r in runs])

    await ledger.compact()

    assert (await ledger.outstanding(), [await ledger.is_running(r) for r in runs]) == before
    assert {line["run_id"] for line in _lines(path)} == {"dead-leftover", "finished-leftover", "running"}
    assert _listing(path.parent) == ["faults.jsonl", "faults.jsonl.lock"]
    assert _mode(path) == 0o600


async def test_a_compaction_that_fails_leaves_the_old_file_whole(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the new file cannot be put in place, the old one is untouched and no temporary file is left."""
    ledger = FileFaultLedger(path)
    await ledger.run_started("r1")
    await ledger.run_finished("r1")
    await ledger.planned(_toxic("r2", "a"))
    original = _lines(path)

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        await ledger.compact()
    assert _lines(path) == original
    assert _listing(path.parent) == ["faults.jsonl", "faults.jsonl.lock"]


async def test_appends_during_compaction_are_not_lost(path: Path) -> None:
    """Compaction replaces the file under the same lock appends take: an append racing it lands in the new file."""
    count = 150
    ledger = FileFaultLedger(path)
    await ledger.run_started("settled")
    await ledger.run_finished("settled")
    worker = _appender(path, "busy", count)
    compactions = 0
    while worker.poll() is None or compactions == 0:
        await ledger.compact()
        compactions += 1
    assert worker.returncode == 0
    assert sorted(e.toxic or "" for e in await ledger.outstanding()) == sorted(f"t{i}" for i in range(count))
    assert "settled" not in {line["run_id"] for line in _lines(path)}
