"""A fixed-latency HTTP/1.1 server on 127.0.0.1, the target of the generator-fidelity benchmark.

It runs in its own process so the client's CPU time is measured alone, and it is written on bare
``asyncio.Protocol`` (not ``aiohttp.web``) so that, at the rates the benchmark drives, it stays far
from being the bottleneck: every request costs one parse of the head and one timer.

Every request is answered after ``--latency-ms``:

- ``POST /v1/chat/completions``: an OpenAI chat stream (``text/event-stream``, chunked): a role chunk and
  the first token chunk, then one token chunk every ``--chunk-interval-ms`` until ``--chunks`` tokens
  were sent, then a closing chunk with ``finish_reason`` and ``data: [DONE]``.
- ``GET /__stats``: at once, ``{"requests": n, "cpu_s": s}`` (this process's CPU time), for the benchmark
  to check the server was not the limit.
- anything else: a small JSON body, ``{"ok":true}``.

Started as ``python bench/fixed_latency_server.py [--port 0]``; prints ``PORT <n>`` once it listens and
serves until SIGTERM/SIGINT or until its standard input closes (so it dies with the benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time

HOST = "127.0.0.1"
_HEAD_END = b"\r\n\r\n"
_CONTENT_LENGTH = b"\r\ncontent-length:"
_PLAIN = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
_STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_STREAM_PATH = b"/v1/chat/completions"
_STATS_PATH = b"/__stats"


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding frame."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(chunk: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def _chat_chunk(delta: dict[str, str], finish_reason: str | None) -> bytes:
    return _event(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
    )


class Stream:
    """The precomputed writes of one streamed answer: first, middle (one per further token), last."""

    def __init__(self, chunks: int) -> None:
        token = _frame(_chat_chunk({"content": " tok"}, None))
        self.first = _STREAM_HEAD + _frame(_chat_chunk({"role": "assistant", "content": ""}, None)) + token
        self.middle = token
        self.middle_count = chunks - 1
        self.last = _frame(_chat_chunk({}, "length")) + _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class Server:
    """Counts requests and holds the settings every connection shares."""

    def __init__(self, latency_s: float, stream: Stream, chunk_interval_s: float) -> None:
        self.latency_s = latency_s
        self.stream = stream
        self.chunk_interval_s = chunk_interval_s
        self.requests = 0


class Connection(asyncio.Protocol):
    """One keep-alive client connection; requests are answered in order (the client does not pipeline)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(_HEAD_END)) >= 0:
            head = bytes(self.buffer[:end])
            length = _content_length(head)
            total = end + len(_HEAD_END) + length
            if len(self.buffer) < total:
                return
            del self.buffer[:total]
            self._answer(head)

    def _answer(self, head: bytes) -> None:
        server = self.server
        server.requests += 1
        method, _, rest = head.partition(b" ")
        path = rest.partition(b" ")[0]
        if path == _STATS_PATH:
            body = json.dumps({"requests": server.requests, "cpu_s": time.process_time()}).encode()
            self._write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        elif method == b"POST" and path == _STREAM_PATH:
            self.loop.call_later(server.latency_s, self._stream, 0, self.loop.time() + server.latency_s)
        else:
            self.loop.call_later(server.latency_s, self._write, _PLAIN)

    def _stream(self, sent: int, first_at: float) -> None:
        """Writes the answer's part number ``sent``; the next is due at a fixed offset from the first, so
        timer overshoot does not add up over the chunks."""
        stream = self.server.stream
        if sent == 0:
            self._write(stream.first)
        elif sent <= stream.middle_count:
            self._write(stream.middle)
        if sent >= stream.middle_count:
            self._write(stream.last)
        elif self.server.chunk_interval_s > 0:
            self.loop.call_at(first_at + (sent + 1) * self.server.chunk_interval_s, self._stream, sent + 1, first_at)
        else:
            self._stream(sent + 1, first_at)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


def _content_length(head: bytes) -> int:
    at = head.lower().find(_CONTENT_LENGTH)
    if at < 0:
        return 0
    value = head[at + len(_CONTENT_LENGTH) :].split(b"\r\n", 1)[0]
    return int(value.strip())


async def serve(port: int, latency_s: float, chunks: int, chunk_interval_s: float) -> None:
    """Serves until a signal or the end of standard input; prints ``PORT <n>`` once listening."""
    loop = asyncio.get_running_loop()
    state = Server(latency_s, Stream(chunks), chunk_interval_s)
    server = await loop.create_server(lambda: Connection(state), HOST, port, backlog=4096)
    stopped = loop.create_future()

    def stop() -> None:
        if not stopped.done():
            stopped.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)

    def watch_stdin() -> None:
        # Raw reads of fd 0: a buffered sys.stdin read would hold its lock through interpreter shutdown.
        with contextlib.suppress(OSError):
            while os.read(sys.stdin.fileno(), 4096):
                pass
        with contextlib.suppress(RuntimeError):  # the loop may already be closed
            loop.call_soon_threadsafe(stop)

    threading.Thread(target=watch_stdin, daemon=True).start()
    bound = server.sockets[0].getsockname()[1]
    print(f"PORT {bound}", flush=True)
    async with server:
        await stopped


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="delay before the answer starts")
    parser.add_argument("--chunks", type=int, default=16, help="token chunks per streamed answer (>= 1)")
    parser.add_argument("--chunk-interval-ms", type=float, default=2.0, help="gap between token chunks")
    args = parser.parse_args(argv)
    if args.chunks < 1:
        parser.error("--chunks must be >= 1")
    asyncio.run(serve(args.port, args.latency_ms / 1000.0, args.chunks, args.chunk_interval_ms / 1000.0))


if __name__ == "__main__":
    main()
