"""The aiohttp application of the simulated target: routes, handlers, and the engine's lifetime.

:func:`create_app` builds an application that owns one :class:`~cliffwatch.simulator.engine.SimulatedEngine`
(started and stopped through ``cleanup_ctx``). Handlers parse the request (``openai_format``), submit it
to the engine, and relay its tokens as a whole response or an SSE stream. A handler always cancels its
sequence when it leaves, so a client that disconnects (the handler is cancelled, or a write fails) stops
costing the engine anything; for a response that already ended the cancel is a no-op.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.simulator.batching import QueueFull
from cliffwatch.simulator.engine import (
    EngineClock,
    EngineClosed,
    Generation,
    GenerationAborted,
    GenerationInterrupted,
    QueueDeadlineExceeded,
    SimulatedEngine,
)
from cliffwatch.simulator.openai_format import (
    DONE_EVENT,
    ChunkWriter,
    GenerationRequest,
    Kind,
    SimulatedApiError,
    completion_body,
    error_body,
    parse_generation,
    parse_json_body,
)
from cliffwatch.simulator.prometheus import CONTENT_TYPE as METRICS_CONTENT_TYPE
from cliffwatch.simulator.prometheus import render as render_metrics

MAX_BODY_BYTES = 1 << 20

ENGINE = web.AppKey("engine", SimulatedEngine)
MODEL = web.AppKey("model", TargetModel)
WALL_CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("wall_clock")
STARTED_AT = web.AppKey("started_at", int)

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(
    model: TargetModel, *, engine_clock: EngineClock | None = None, wall_clock: Callable[[], float] = time.time
) -> web.Application:
    """An application serving ``model``; its engine runs while the application is started.

    Run it with ``handler_cancellation=True`` (as :func:`~cliffwatch.simulator.runner.serve` and aiohttp's
    ``TestServer`` do) so a queued request whose client disconnects is dropped before it is admitted;
    without it, disconnects are only noticed when a stream write fails. ``wall_clock`` gives the
    ``created`` timestamps; ``engine_clock`` paces the steps (the event loop's clock by default).
    """
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_json_errors])
    app[MODEL] = model
    app[ENGINE] = SimulatedEngine(model, clock=engine_clock)
    app[WALL_CLOCK] = wall_clock
    app[STARTED_AT] = int(wall_clock())
    app.cleanup_ctx.append(_run_engine)
    # Closing on shutdown (before aiohttp waits for in-flight handlers) ends queued and running
    # requests at once instead of letting shutdown wait for a long queue to drain.
    app.on_shutdown.append(_close_engine)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return app


async def _run_engine(app: web.Application) -> AsyncIterator[None]:
    async with app[ENGINE]:
        yield


async def _close_engine(app: web.Application) -> None:
    app[ENGINE].close()


def _error(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Router errors (unknown path, wrong method) get an OpenAI-style JSON body like every other error."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(
            exc.status,
            error_body(exc.reason, type_="invalid_request_error"),
            headers={k: v for k, v in exc.headers.items() if k == "Allow"},
        )


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Kind.CHAT)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Kind.COMPLETION)


async def list_models(request: web.Request) -> web.Response:
    model = request.app[MODEL]
    entry = {"id": model.model, "object": "model", "created": request.app[STARTED_AT], "owned_by": "cliffwatch"}
    return web.json_response({"object": "list", "data": [entry]})


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "model": request.app[MODEL].model})


async def metrics(request: web.Request) -> web.Response:
    body = render_metrics(request.app[ENGINE].stats())
    return web.Response(body=body.encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})


async def _read_body(request: web.Request) -> bytes:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise SimulatedApiError(
            413,
            f"The request body is larger than the {MAX_BODY_BYTES} bytes this server accepts.",
            type_="invalid_request_error",
            code="request_too_large",
        ) from exc


async def _generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    app = request.app
    engine, model = app[ENGINE], app[MODEL]
    created = int(app[WALL_CLOCK]())
    try:
        parsed = parse_generation(parse_json_body(await _read_body(request)), kind, model)
    except SimulatedApiError as exc:
        engine.record_bad_request()
        return _error(exc.status, exc.body())
    try:
        generation = engine.submit(
            prompt_tokens=parsed.prompt_tokens,
            max_tokens=parsed.max_tokens,
            streaming=parsed.stream,
            priority=parsed.priority,
            tenant=parsed.tenant,
            blocks=parsed.blocks,
            tail=parsed.tail,
        )
    except QueueFull as exc:
        return _error(
            429,
            error_body(str(exc), type_="rate_limit_exceeded", code="queue_full"),
            headers={"Retry-After": str(exc.retry_after_s)},
        )
    except EngineClosed as exc:
        return _error(503, error_body(str(exc), type_="server_error", code="shutting_down"))
    try:
        if parsed.stream:
            return await _stream(request, generation, parsed, created=created, model_name=model.model)
        tokens = await generation.result()
        body = completion_body(
            parsed,
            request_id=generation.id,
            created=created,
            model=model.model,
            text="".join(tokens),
            completion_tokens=len(tokens),
        )
        return web.json_response(body)
    except QueueDeadlineExceeded as exc:
        return _error(503, error_body(str(exc), type_="server_error", code="queue_timeout"))
    except GenerationAborted as exc:
        return _error(503, error_body(str(exc), type_="server_error", code="shutting_down"))
    finally:
        # Reached with the sequence still live only when the client went away: the handler was
        # cancelled on disconnect, or a write failed. Aborting here is what vLLM does on disconnect.
        engine.cancel(generation)


async def _stream(
    request: web.Request, generation: Generation, parsed: GenerationRequest, *, created: int, model_name: str
) -> web.StreamResponse:
    """Relays tokens as SSE. Headers go out with the first token, so a queue drop can still be a 503."""
    writer = ChunkWriter(parsed, request_id=generation.id, created=created, model=model_name)
    response = web.StreamResponse(headers=_SSE_HEADERS)
    sent = 0
    try:
        while True:
            tokens = await generation.wait_tokens()
            data = b""
            if not response.prepared:
                await response.prepare(request)
                data = writer.opening()
            if tokens:
                sent += len(tokens)
                await response.write(data + writer.tokens(tokens))
                continue
            await response.write(data + writer.closing(sent))
            await response.write_eof()
            return response
    except GenerationInterrupted:
        # As llama-cpp-python's interrupt_requests: [DONE] with no finish_reason, after the role chunk at least
        if not response.prepared:
            await response.prepare(request)
            await response.write(writer.opening())
        await response.write(DONE_EVENT)
        await response.write_eof()
        return response
    except GenerationAborted:
        if not response.prepared:
            raise
        return response  # the engine shut down mid-stream: the client sees a truncated stream
    except ConnectionError:
        # The client went away mid-stream; the caller's cancel counts the abort. Not an error here.
        return response
