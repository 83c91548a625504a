"""A server of known capacity for the capacity truth tests: a real HAProxy in front of a fixed-time backend.

The backend answers every request after exactly ``service_s`` seconds and serves any number at once; HAProxy
lets at most ``maxconn`` of them reach it and queues the rest for up to ``timeout queue``, then answers 503.
That is the textbook bounded server: ``maxconn / service_s`` requests per second, no more, whatever the load.
Both run as child processes on loopback (the backend is this file run as a script), so the load generator's
event loop measures them rather than sharing its core with them. The tests fail, not skip, without HAProxy.

Run ``python haproxy_testkit.py PORT SERVICE_MS`` to start the backend on its own.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HAPROXY = "/usr/sbin/haproxy"
START_TIMEOUT_S = 10.0


def haproxy_binary() -> str:
    """The HAProxy binary: /usr/sbin/haproxy (Debian's ``haproxy`` package, which ``make test`` installs) or PATH's."""
    if Path(HAPROXY).is_file():
        return HAPROXY
    found = shutil.which("haproxy")
    if found is None:
        raise AssertionError(f"{HAPROXY} is missing: install it with `sudo apt-get install -y haproxy`")
    return found


def free_port() -> int:
    """A loopback port that was free a moment ago (HAProxy needs its port in the config, not 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _, stderr = process.communicate()
            raise AssertionError(f"{what} exited with {process.returncode}: {stderr.decode(errors='replace')}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S} s")


@contextlib.contextmanager
def child(command: list[str], port: int, what: str) -> Iterator[subprocess.Popen[bytes]]:
    """Runs ``command`` until the block ends, once it listens on ``port``; stops it with SIGTERM, then SIGKILL."""
    from cliffwatch.adapters.runtime.processes import die_with_parent

    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=die_with_parent(),
    )
    try:
        wait_listening(port, process, what)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr is not None:
            process.stderr.close()


@dataclass(frozen=True, kw_only=True)
class BoundedServer:
    """HAProxy's address, and the numbers its capacity follows from."""

    url: str  # http://127.0.0.1:port
    maxconn: int
    service_s: float
    queue_timeout_s: float

    @property
    def capacity_rps(self) -> float:
        return self.maxconn / self.service_s


def haproxy_config(*, port: int, backend_port: int, maxconn: int, queue_timeout_ms: int) -> str:
    return f"""\
global
    maxconn 2000

defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout queue {queue_timeout_ms}ms

frontend front
    bind 127.0.0.1:{port}
    default_backend fixed

backend fixed
    server only 127.0.0.1:{backend_port} maxconn {maxconn}
"""


@contextlib.contextmanager
def bounded_server(*, maxconn: int, service_s: float, queue_timeout_s: float) -> Iterator[BoundedServer]:
    """A fixed-time backend and an HAProxy limiting it to ``maxconn`` at once, both stopped at the end."""
    binary = haproxy_binary()
    backend_port, port = free_port(), free_port()
    backend = [sys.executable, __file__, str(backend_port), str(service_s * 1000)]
    with tempfile.TemporaryDirectory(prefix="cliffwatch-haproxy-") as workdir:
        config = Path(workdir) / "haproxy.cfg"
        config.write_text(
            haproxy_config(
                port=port, backend_port=backend_port, maxconn=maxconn, queue_timeout_ms=round(queue_timeout_s * 1000)
            )
        )
        with (
            child(backend, backend_port, "the fixed-time backend"),
            child([binary, "-db", "-f", str(config)], port, "haproxy"),
        ):
            yield BoundedServer(
                url=f"http://127.0.0.1:{port}", maxconn=maxconn, service_s=service_s, queue_timeout_s=queue_timeout_s
            )


def serve_backend(port: int, service_ms: float) -> None:
    """Answers every request with a small JSON body after ``service_ms``, any number at once."""
    import asyncio

    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(service_ms / 1000)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, handle_signals=True)


if __name__ == "__main__":
    serve_backend(int(sys.argv[1]), float(sys.argv[2]))
