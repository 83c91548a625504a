"""The load path's candidate transports alone, in one sitting against one arrival-recording server: what a
request costs each of them, the rest of cliffwatch's path left out.

- ``aiohttp``: a ``ClientSession`` with a bounded pool, the body read whole or a stream iterated piece by piece;
- ``lean``: cliffwatch's own HTTP/1.1 client on asyncio Protocols (``adapters/loadgen/wire``), its answer
  handed to a sink from ``data_received``;
- ``pyreqwest``: a Rust-backed client on PyPI (reqwest over tokio, its own threads), the maintained compiled
  candidate with an asyncio API; installed by this bench into ``bench/.build/peers/pyreqwest-venv``.

Each runs in a process of its own pinned to core 0 (the Go server ``bench/arrivals_server`` on core 1),
sending at a constant rate for ``--duration`` seconds after a warm-up, and reports the CPU its whole process
spent a request (every thread, tokio's included), its latency and its errors; the server's record says
whether the rate arrived.

    .venv/bin/python bench/transports.py --loads plain,short --rates-plain 2000,4000 --rates-short 400,800
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: arrivals and the peers package

STREAM_BODY = b'{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}'
PYREQWEST = "pyreqwest==0.15.1"
CLIENT_CORE = 0
WARM_UP = 50


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    return usage.ru_utime + usage.ru_stime


def _aiohttp(url: str, stream: bool) -> Callable[[], Awaitable[int]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000), cookie_jar=aiohttp.DummyCookieJar())

    async def one() -> int:
        if stream:
            async with session.post(url + "/v1/chat/completions", data=STREAM_BODY,
                                    headers={"Content-Type": "application/json"}) as answer:  # fmt: skip
                async for _ in answer.content.iter_any():
                    pass
                return answer.status
        async with session.get(url + "/load") as answer:
            await answer.read()
            return answer.status

    return one


def _lean(url: str, stream: bool) -> Callable[[], Awaitable[int]]:
    from cliffwatch.adapters.loadgen.wire.pool import Origin, WirePool
    from cliffwatch.adapters.network.target_access import Destinations
    from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist

    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    destinations = Destinations(allowlist)
    host, port = url.split("//")[1].split(":")
    origin = Origin(scheme="http", host=host, port=int(port))
    pool = WirePool(destinations, limit=1000, connect_timeout_s=5.0, read_timeout_s=None)
    if stream:
        request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(STREAM_BODY)}\r\n\r\n").encode() + STREAM_BODY  # fmt: skip
    else:
        request = f"GET /load HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()

    class Sink:
        status = 0

        def head(self, status: int, reason: str, headers: list[tuple[bytes, bytes]], now: int) -> None:
            self.status = status

        def body(self, data: bytes, now: int) -> bool:
            return True

    admitted = False

    async def one() -> int:
        nonlocal admitted
        if not admitted:
            await destinations.admit(url)
            admitted = True
        connection = await pool.acquire(origin)
        sink = Sink()
        try:
            await connection.send(request, sink)
        finally:
            pool.release(connection, origin)
        return sink.status

    return one


def _pyreqwest(url: str, stream: bool) -> Callable[[], Awaitable[int]]:
    from pyreqwest.client import ClientBuilder

    client = ClientBuilder().max_connections(1000).build()

    async def one() -> int:
        if stream:
            builder = client.post(url + "/v1/chat/completions").body_bytes(STREAM_BODY)
            async with builder.header("Content-Type", "application/json").build_streamed() as answer:
                reader = answer.body_reader
                while await reader.read_chunk() is not None:
                    pass
                return answer.status
        answer = await client.get(url + "/load").build().send()
        await answer.bytes()
        return answer.status

    return one


async def _send(kind: str, url: str, rate: float, duration_s: float, stream: bool) -> dict[str, Any]:
    one = {"aiohttp": _aiohttp, "lean": _lean, "pyreqwest": _pyreqwest}[kind](url, stream)
    errors = 0
    latencies: list[float] = []

    async def timed(at: float) -> None:
        nonlocal errors
        try:
            if await one() != 200:
                errors += 1
        except Exception:  # the bench counts every failure, whatever raised it
            errors += 1
        latencies.append(loop.time() - at)

    loop = asyncio.get_running_loop()
    await asyncio.gather(*(timed(loop.time()) for _ in range(WARM_UP)))
    latencies.clear()
    errors = 0
    count = int(rate * duration_s)
    start = loop.time() + 0.2
    tasks = []
    cpu = _cpu_s()
    for index in range(count):
        at = start + index / rate
        wait = at - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(loop.create_task(timed(at)))
    await asyncio.gather(*tasks)
    spent = _cpu_s() - cpu
    latencies.sort()
    return {"transport": kind, "rate": rate, "sent": count, "errors": errors,
            "cpu_ms_per_request": round(1000 * spent / count, 4),
            "p50_ms": round(1000 * latencies[count // 2], 2),
            "p99_ms": round(1000 * latencies[min(count - 1, int(count * 0.99))], 2)}  # fmt: skip


def _child(args: argparse.Namespace) -> None:
    figures = asyncio.run(_send(args.child, args.url, args.rate, args.duration, args.chunks > 0))
    print(json.dumps(figures), flush=True)


def _python_for(kind: str) -> str:
    if kind != "pyreqwest":
        return sys.executable
    from peers.install import PEERS

    venv = PEERS / "pyreqwest-venv"
    marker = venv / "cliffwatch-bench.pin"
    if not (marker.exists() and marker.read_text() == PYREQWEST):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, PYREQWEST], check=True)
        marker.write_text(PYREQWEST)
    return str(venv / "bin" / "python")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--transports", default="aiohttp,lean,pyreqwest")
    parser.add_argument("--loads", default="plain,short")
    parser.add_argument("--rates-plain", default="1000,2000,4000")
    parser.add_argument("--rates-short", default="200,400,800")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--chunks", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    from arrivals import arrivals_server, pinned

    found = []
    for load in args.loads.split(","):
        chunks = 16 if load == "short" else 0
        rates = [float(r) for r in (args.rates_short if chunks else args.rates_plain).split(",")]
        with arrivals_server(20.0, chunks=max(chunks, 1)) as server:
            for rate in rates:
                for kind in args.transports.split(","):
                    server.drain()
                    argv = [_python_for(kind), __file__, "--child", kind, "--url", server.base_url,
                            "--rate", str(rate), "--duration", str(args.duration), "--chunks", str(chunks)]  # fmt: skip
                    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
                    done = subprocess.run(pinned(argv, CLIENT_CORE), capture_output=True, text=True, env=env,
                                          check=False, timeout=args.duration * 10 + 60)  # fmt: skip
                    if done.returncode != 0:
                        print(f"{load} {kind} {rate:g}: failed: {done.stderr[-500:]}", file=sys.stderr)
                        continue
                    figures = {"load": load, **json.loads(done.stdout.strip().splitlines()[-1])}
                    figures["server_saw"] = len(server.drain())
                    found.append(figures)
                    print(f"{load:6s} {kind:10s} {rate:7g}/s  cpu {figures['cpu_ms_per_request']:.3f} ms/req  "
                          f"p50 {figures['p50_ms']:.1f}  p99 {figures['p99_ms']:.1f} ms  errors {figures['errors']}",
                          flush=True)  # fmt: skip
                    time.sleep(0.5)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
