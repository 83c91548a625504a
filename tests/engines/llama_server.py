"""A real llama.cpp ``llama-server`` for the tests marked ``llama_server``: built once per machine, started here.

``built_llama_server`` runs tests/engines/build-llama-server.sh (a no-op once the binary is in its cache
outside the clone; the first build takes about five minutes on two cores) and fails the test with the
script's own words when it cannot build. ``running_llama_server`` starts the binary on a free loopback port
with a tiny random-weight model around Phi-3's real tokenizer (tiny_gguf.py), one slot and ``--metrics``,
waits for ``/health``, and stops it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.tiny_gguf import write_tiny_model

BUILD_SCRIPT = Path(__file__).with_name("build-llama-server.sh")
VOCAB = "ggml-vocab-phi-3.gguf"
START_TIMEOUT_S = 60.0


def built_llama_server() -> Path:
    """The binary's path, building it first when it is not in the cache."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python3")})  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"llama-server could not be built (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_llama_server(work: Path, *, context: int = 2048, slots: int = 1) -> Iterator[str]:
    """Starts the server (``-c context -np slots --metrics``, one thread) and yields its base URL."""
    binary = built_llama_server()
    model = write_tiny_model(binary.parent / VOCAB, work / "tiny-phi3-tokenizer.gguf")
    port = _free_port()
    log = (work / f"llama-server-{port}.log").open("w")
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(context),
               "-np", str(slots), "--metrics", "-t", "1", "--no-webui"]  # fmt: skip
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama-server exited {process.returncode}: see {log.name}")
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError),
                urllib.request.urlopen(url + "/health", timeout=2) as answer,
            ):
                if answer.status == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server did not answer /health within {START_TIMEOUT_S:g} s: see {log.name}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
