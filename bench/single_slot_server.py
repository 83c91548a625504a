"""A single-slot LLM server on 127.0.0.1, for the sweep accuracy benchmark: one request at a time, FIFO.

It mimics llama.cpp's ``llama-server -np 1 --metrics`` (one slot; tools/server/server-context.cpp): a request
waits for the slot in arrival order, then streams ``--tokens`` tokens evenly over ``--service-ms`` as an OpenAI
chat stream (a role chunk, token chunks, a chunk with ``finish_reason`` and ``data: [DONE]``), so its queue
grows by ``(λ − μ)/μ`` seconds each second above saturation, slowly next to an SLO of several service times.
Its ``/metrics`` page has llama.cpp's names for the queue and the slot (``llamacpp:requests_deferred``,
``llamacpp:requests_processing``) and its token counter, so a sweep with ``target.metrics`` reads the server's
own queue through the llama.cpp profile.

Started as ``python bench/single_slot_server.py --service-ms 320 [--port 0]``; prints ``PORT <n>`` once it
listens and serves until SIGTERM or until its standard input closes (so it dies with the benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import threading

from aiohttp import web

HOST = "127.0.0.1"


class Slot:
    """The one slot, its FIFO queue (asyncio.Lock wakes waiters in order) and llama.cpp's counters."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.deferred = 0
        self.processing = 0
        self.predicted = 0
        self.prompted = 0


def _event(delta: dict[str, str], finish_reason: str | None) -> bytes:
    chunk = {"id": "chatcmpl-slot", "object": "chat.completion.chunk", "created": 0, "model": "slot",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}  # fmt: skip
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def app(service_s: float, tokens: int) -> web.Application:
    slot = Slot()
    interval = service_s / tokens

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        words = len(str(body.get("messages", [{}])[-1].get("content", "")).split())
        slot.deferred += 1
        async with slot.lock:
            slot.deferred -= 1
            slot.processing += 1
            try:
                response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await response.prepare(request)
                await response.write(_event({"role": "assistant"}, None))
                loop = asyncio.get_running_loop()
                start = loop.time()
                for index in range(tokens):
                    # on an absolute schedule: the slot is busy exactly service_s, whatever the timer slop
                    await asyncio.sleep(max(0.0, start + (index + 1) * interval - loop.time()))
                    await response.write(_event({"content": "tok "}, None))
                    slot.predicted += 1
                slot.prompted += words
                await response.write(_event({}, "length"))
                await response.write(b"data: [DONE]\n\n")
                return response
            except ConnectionResetError:
                # the client gave up (its timeout): the slot is freed at the next write, as llama.cpp's server
                # stops a task once it finds the connection closed; not an error of the server's
                return response
            finally:
                slot.processing -= 1

    async def metrics(request: web.Request) -> web.Response:
        lines = [
            "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
            "# TYPE llamacpp:prompt_tokens_total counter", f"llamacpp:prompt_tokens_total {slot.prompted:.6g}",
            "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.",
            "# TYPE llamacpp:tokens_predicted_total counter", f"llamacpp:tokens_predicted_total {slot.predicted:.6g}",
            "# HELP llamacpp:requests_processing Number of requests processing.",
            "# TYPE llamacpp:requests_processing gauge", f"llamacpp:requests_processing {slot.processing}",
            "# HELP llamacpp:requests_deferred Number of requests deferred.",
            "# TYPE llamacpp:requests_deferred gauge", f"llamacpp:requests_deferred {slot.deferred}",
        ]  # fmt: skip
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def root(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    application = web.Application()
    application.router.add_post("/v1/chat/completions", chat)
    application.router.add_get("/metrics", metrics)
    application.router.add_get("/", root)
    return application


async def serve(port: int, service_s: float, tokens: int) -> None:
    runner = web.AppRunner(app(service_s, tokens))
    await runner.setup()
    site = web.TCPSite(runner, HOST, port)
    await site.start()
    server = site._server
    assert server is not None
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)  # type: ignore[union-attr]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
    await stop.wait()
    with contextlib.suppress(Exception):
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--service-ms", type=float, default=320.0)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.service_ms / 1000.0, args.tokens))


if __name__ == "__main__":
    main()
