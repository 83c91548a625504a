"""A loopback webhook receiver for the tests that check what cliffwatch posts: it answers 500 on ``/broken`` and
204 anywhere else, and keeps every call it was sent (path, headers, body, and when it arrived, wall clock)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Call:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() when it arrived: comparable with the service's own timestamps


@contextmanager
def webhook_receiver() -> Iterator[tuple[str, list[Call]]]:
    """The receiver's origin (``http://127.0.0.1:PORT``) and the calls it was sent, in arrival order."""
    calls: list[Call] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            calls.append(Call(path=self.path, headers=dict(self.headers.items()), body=body, at=time.time()))
            self.send_response(500 if self.path == "/broken" else 204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", calls
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()
