"""Finding the ``toxiproxy-server`` binary, and running a private one as a child process.

``make toxiproxy`` builds Shopify's Toxiproxy server into ``.tools/bin/`` unless one is on ``PATH``.

A ``ManagedToxiproxy`` belongs to the process that started it. On Linux the child is started with
``PR_SET_PDEATHSIG`` = SIGKILL, so the kernel kills it when its parent dies, however it dies (even
``kill -9``, where no ``finally`` runs): the proxies and every toxic live in the server's memory and die with
it, so a crashed run cannot leave faults behind on its private server. Two limits of the mechanism: the
signal follows the *thread* that started the child (start it from a thread that lives as long as the
process, such as the event loop's), and it is not available on other systems, where only a clean exit stops
the server.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import IO

from cliffwatch.adapters.faults.toxiproxy import ANY_PROXY, ToxiproxyClient
from cliffwatch.adapters.network.control_planes import CONTROL_PLANES
from cliffwatch.adapters.runtime.processes import die_with_parent
from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.security.deny_list import rule_for

BINARY = "toxiproxy-server"
# src/cliffwatch/adapters/faults/ → the repository root, where `make toxiproxy` puts the binary.
TOOLS_BINARY = Path(__file__).resolve().parents[4] / ".tools" / "bin" / BINARY
PLANE = "cliffwatch's Toxiproxy API (a private one this process started)"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_BIND_FAILED = "address already in use"


def find_toxiproxy_server(explicit: Path | str | None = None) -> Path | None:
    """The ``toxiproxy-server`` to run: ``explicit`` if given (None when it is not an executable file: a
    configured path that is wrong is not silently replaced), else the one on ``PATH``, else the one
    ``make toxiproxy`` built in ``<repo>/.tools/bin/``; None when there is none."""
    if explicit is not None:
        path = Path(explicit)
        return path if _is_executable(path) else None
    on_path = shutil.which(BINARY)
    if on_path is not None:
        return Path(on_path)
    return TOOLS_BINARY if _is_executable(TOOLS_BINARY) else None


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


class ManagedToxiproxy:
    """``async with ManagedToxiproxy() as server:`` runs a private Toxiproxy on a free loopback port.

    ``server.url`` is its API; ``host`` is an IPv4 address (keep it loopback: the API has no authentication).
    On exit the server gets SIGTERM, then SIGKILL after ``stop_timeout_s``. Raises ``FaultInjectionFailed``
    when there is no binary or the server does not answer within ``start_timeout_s``.
    """

    def __init__(
        self,
        binary: Path | str | None = None,
        *,
        host: str = "127.0.0.1",
        start_timeout_s: float = START_TIMEOUT_S,
        stop_timeout_s: float = STOP_TIMEOUT_S,
    ) -> None:
        self.binary = find_toxiproxy_server(binary)
        self._requested = binary
        self.host = host
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._drain: threading.Thread | None = None
        self._bind_failed = threading.Event()
        self._plane: int | None = None  # its API's place, denied to every run while it lives
        self.output: deque[str] = deque(maxlen=50)  # the last lines it logged, for error messages

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the Toxiproxy server is not running")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def __aenter__(self) -> ManagedToxiproxy:
        if self.binary is None:
            where = f"{self._requested} is not an executable file" if self._requested else f"no {BINARY} on PATH"
            reason = f"{where}, nor in {TOOLS_BINARY}: run `make toxiproxy`"
            raise FaultInjectionFailed(proxy=ANY_PROXY, toxic=None, reason=reason)
        deadline = time.monotonic() + self.start_timeout_s
        try:
            # A port found free can be taken before the server binds it; Toxiproxy then logs the error but
            # keeps running, so that case is recognised and retried on another port.
            for _ in range(3):
                if await self._start(self.binary, deadline):
                    return self
                await asyncio.to_thread(self._stop)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self._stop))
            raise
        raise self._failed("could not bind a free port three times")

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(asyncio.to_thread(self._stop))

    async def _start(self, binary: Path, deadline: float) -> bool:
        """Starts the server and waits until *it* answers; False when its port was taken meanwhile."""
        self._port = _free_port(self.host)
        self._plane = CONTROL_PLANES.hold(rule_for(self.host, self._port, PLANE))
        self.output.clear()
        self._bind_failed.clear()
        # A proxy only this server knows (loaded from a config file at start-up) tells its API apart from
        # another server's that happens to answer on the port.
        marker = f"cliffwatch-managed-{os.getpid()}-{self._port}"
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="toxiproxy-") as config:
            json.dump(
                [{"name": marker, "listen": f"{self.host}:0", "upstream": f"{self.host}:9", "enabled": False}], config
            )
            config.flush()
            # Popen and a drain thread rather than asyncio's subprocess: the output must be read even while
            # no event loop runs (a server shared by a whole test session outlives each test's loop).
            self._process = subprocess.Popen(  # noqa: ASYNC220 -- Popen only forks; nothing here waits
                [str(binary), "-host", self.host, "-port", str(self._port), "-config", config.name],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),
            )
            self._drain = threading.Thread(
                target=_drain,
                args=(self._process.stdout, self.output, self._bind_failed),
                name="toxiproxy-output",
                daemon=True,
            )
            self._drain.start()
            async with ToxiproxyClient(self.url, timeout_s=1.0, retries=0) as client:
                while True:
                    if self._process.poll() is not None:
                        raise self._failed(f"exited with code {self._process.returncode}")
                    if self._bind_failed.is_set():
                        return False
                    try:
                        ours = await client.get_proxy(marker) is not None
                    except FaultInjectionFailed:  # not listening yet
                        ours = False
                    if ours:
                        await client.delete_proxy(marker)
                        return True
                    if time.monotonic() > deadline:
                        raise self._failed(f"its API at {self.url} did not answer within {self.start_timeout_s:g}s")
                    await asyncio.sleep(0.05)

    def _stop(self) -> None:
        """Stops the server (blocking: run it in a thread from async code)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                # Toxiproxy waits up to 30 s for open connections to close; a held toxic can keep one open
                process.kill()
                process.wait()
        if self._drain is not None:
            self._drain.join(1.0)  # the pipe closes with the process, which ends the thread
            self._drain = None
        if self._plane is not None:
            CONTROL_PLANES.release(self._plane)
            self._plane = None

    def _failed(self, reason: str) -> FaultInjectionFailed:
        tail = " | ".join(list(self.output)[-5:])
        return FaultInjectionFailed(
            proxy=ANY_PROXY, toxic=None, reason=f"{self.binary}: {reason}" + (f"; it said: {tail}" if tail else "")
        )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _drain(stream: IO[bytes] | None, tail: deque[str], bind_failed: threading.Event) -> None:
    # The server logs every API call and connection: unread, its pipe would fill and block it mid-run.
    if stream is None:
        return
    with stream:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            if _BIND_FAILED in line:
                bind_failed.set()
