"""Starts the built-in simulated target in a child process on a free loopback port, and stops it.

A separate process keeps the simulator off the load generator's event loop and CPU core, so the
generator measures the target rather than competing with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from collections import deque
from types import TracebackType

from cliffwatch.adapters.runtime.processes import die_with_parent
from cliffwatch.domain.errors import BuiltinTargetFailed
from cliffwatch.domain.scenario.target_model import TargetModel

READY = re.compile(r"listening on (http://\S+)")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


class BuiltinTarget:
    """``async with BuiltinTarget(model) as url:`` runs ``cliffwatch target`` for the block's duration."""

    def __init__(self, model: TargetModel, *, host: str = "127.0.0.1") -> None:
        self.model = model
        self.host = host
        self.url: str | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._stderr_tail: deque[str] = deque(maxlen=20)
        self._drains: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> str:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cliffwatch", "target", "--host", self.host, "--port", "0",
            "--config-json", json.dumps(self.model.to_dict()),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=die_with_parent(),
        )  # fmt: skip
        stdout, stderr = self._process.stdout, self._process.stderr
        if stdout is None or stderr is None:
            raise BuiltinTargetFailed("its output pipes did not open")
        self._drains.append(asyncio.create_task(self._drain(stderr)))
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                while True:
                    line = await stdout.readline()
                    if not line:
                        await self._process.wait()
                        raise BuiltinTargetFailed(
                            f"exited with code {self._process.returncode}: " + " | ".join(self._stderr_tail)
                        )
                    match = READY.search(line.decode(errors="replace"))
                    if match:
                        self.url = match.group(1)
                        break
        except TimeoutError as exc:
            await self._stop()
            raise BuiltinTargetFailed(f"not ready within {START_TIMEOUT_S:g}s") from exc
        except BaseException:
            await self._stop()
            raise
        self._drains.append(asyncio.create_task(self._drain(stdout)))
        return self.url

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(self._stop())

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        # The child's output must be read, or a full pipe would block it mid-run.
        while line := await stream.readline():
            self._stderr_tail.append(line.decode(errors="replace").rstrip())

    async def _stop(self) -> None:
        process = self._process
        if process is None:
            return
        self._process = None
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                process.kill()
                await process.wait()
        for task in self._drains:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
