"""A chat server no calibration can size: it refuses every probe and answers the load.

Every non-streamed request (what the calibration probes are) is refused HTTP 503; streamed ones are answered
with one token and ``usage.prompt_tokens`` of three tokens a word. A generic OpenAI-compatible shape (no engine's
own): what a gateway that sheds non-streamed traffic in front of any server looks like to cliffwatch.
"""

from __future__ import annotations

import json

from aiohttp import web

TOKENS_A_WORD = 3


async def refuses_probes(request: web.Request) -> web.StreamResponse:
    if request.method != "POST":
        return web.Response(status=404)
    body = json.loads(await request.read())
    if not body.get("stream"):
        return web.json_response({"error": "overloaded"}, status=503)
    usage = {"prompt_tokens": TOKENS_A_WORD * len(body["messages"][0]["content"].split()), "completion_tokens": 1}
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "length"}]}
    for event in (chunk, {"choices": [], "usage": usage}):
        await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
