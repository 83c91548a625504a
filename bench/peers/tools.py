"""How each tool is told to send one constant-rate pass, and how its own figures are read back.

Every tool gets the same load: ``rate`` requests per second for ``duration_s`` seconds against the arrivals
server, either plain HTTP (``GET /load``) or an OpenAI chat stream (``POST /v1/chat/completions``, a 64-word
prompt, ``chunks`` token chunks). What a tool says about itself is only used for its latency figure (p99
e2e for plain HTTP, p99 TTFT for streams) and its own error count; the rate and pacing are the server's.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from peers import install

REPO = Path(__file__).resolve().parent.parent.parent
PROMPT = " ".join(f"word{i}" for i in range(64))
# the caps' defaults (1,000 req/s) are a safety net for users; the benchmark lifts them for its loopback server
CLIFFWATCH_CAPS = {"CLIFFWATCH_MAX_OFFERED_RATE": "20000", "CLIFFWATCH_MAX_ATTEMPT_RATE": "20000"}


@dataclass(frozen=True)
class Load:
    base_url: str
    rate: float
    duration_s: float
    chunks: int  # 0: plain HTTP, else token chunks per streamed answer
    scratch: Path  # an empty directory for this pass's files

    @property
    def streams(self) -> bool:
        return self.chunks > 0


@dataclass(frozen=True)
class Command:
    argv: list[str]
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolView:
    """What the tool reported: its p99 (ms), its errors, whether it flagged itself, anything else worth
    keeping."""

    p99_ms: float | None
    errors: int | None
    limited: bool = False
    reasons: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class Tool(Protocol):
    name: str
    streams: bool  # reads SSE streams (TTFT)
    plain: bool  # sends plain HTTP
    pinned: bool  # runs on the client's core only
    exit_ok: frozenset[int]  # exit codes that do not mean the tool failed

    def command(self, load: Load) -> Command: ...

    def read(self, load: Load, done: subprocess.CompletedProcess[bytes]) -> ToolView: ...


class Vegeta:
    name = "vegeta"
    streams = False  # it reads a whole answer; it has no time to first token
    plain = True
    pinned = True
    exit_ok = frozenset({0})

    def command(self, load: Load) -> Command:
        binary = str(install.vegeta())
        argv = [binary, "attack", f"-rate={load.rate:g}/s", f"-duration={load.duration_s:g}s", "-timeout=10s",
                f"-output={load.scratch / 'results.bin'}"]  # fmt: skip
        return Command(argv, stdin=f"GET {load.base_url}/load\n".encode())

    def read(self, load: Load, done: subprocess.CompletedProcess[bytes]) -> ToolView:
        binary = str(install.vegeta())
        report = subprocess.run([binary, "report", "-type=json", str(load.scratch / "results.bin")],
                                capture_output=True, check=True)  # fmt: skip
        figures = json.loads(report.stdout)
        errors = sum(n for code, n in (figures.get("status_codes") or {}).items() if code != "200")
        return ToolView(p99_ms=figures["latencies"]["99th"] / 1e6, errors=errors,
                        extra={"success": figures["success"]})  # fmt: skip


class AsyncioFloor:
    """``floor_client.py``: the least an asyncio process does to send the load (not a peer; a yardstick)."""

    name = "asyncio-floor"
    streams = False
    plain = True
    pinned = True
    exit_ok = frozenset({0})

    def command(self, load: Load) -> Command:
        script = str(Path(__file__).resolve().parent / "floor_client.py")
        argv = [
            str(REPO / ".venv/bin/python"),
            script,
            f"{load.base_url}/load",
            f"{load.rate:g}",
            f"{load.duration_s:g}",
        ]
        return Command(argv)

    def read(self, load: Load, done: subprocess.CompletedProcess[bytes]) -> ToolView:
        figures = json.loads(done.stdout.decode().strip().splitlines()[-1])
        return ToolView(p99_ms=figures["p99_ms"], errors=figures["errors"])


class Cliffwatch:
    """``cliffwatch run`` as a user runs it; ``workers`` > 1 runs ``client.workers`` processes, unpinned;
    ``transport`` is its ``client.transport``: ``lean`` by default (the tool ``cliffwatch``), ``aiohttp`` the
    fallback (``cliffwatch-aiohttp``)."""

    streams = True
    plain = True

    def __init__(self, workers: int = 1, transport: str = "lean") -> None:
        self.workers = workers
        self.transport = transport
        self.name = ("cliffwatch" if workers == 1 else f"cliffwatch-w{workers}") + (
            "" if transport == "lean" else f"-{transport}")  # fmt: skip
        self.pinned = workers == 1
        self.exit_ok = frozenset({0, 1})  # 1: the scorecard failed (a one-phase scenario has no recovery)

    def command(self, load: Load) -> Command:
        target: dict[str, Any] = {"url": load.base_url, "api": "http", "request": {"method": "GET", "path": "/load"}}
        if load.streams:
            target = {"url": load.base_url, "api": "openai-chat",
                      "request": {"model": "bench", "prompt_tokens": 64, "max_tokens": load.chunks}}  # fmt: skip
        client: dict[str, Any] = {"pool_size": 1000, "max_in_flight": 10_000, "transport": self.transport}
        if self.workers > 1:
            client["workers"] = self.workers
        document = {
            "name": "bench-peers", "seed": 1, "slo": {"e2e_ms": 10_000, "timeout_ms": 10_000},
            "target": target, "client": client,
            "phases": [{"name": "load", "role": "baseline", "duration_s": load.duration_s,
                        "arrival": {"process": "constant", "rate": load.rate}}],
        }  # fmt: skip
        scenario = load.scratch / "scenario.json"  # YAML is a superset of JSON
        scenario.write_text(json.dumps(document))
        argv = [str(REPO / ".venv/bin/cliffwatch"), "run", str(scenario), "--json", str(load.scratch / "result.json")]
        return Command(argv, env=CLIFFWATCH_CAPS)

    def read(self, load: Load, done: subprocess.CompletedProcess[bytes]) -> ToolView:
        out = load.scratch / "result.json"
        if not out.exists():
            raise SystemExit(f"cliffwatch run wrote no result (exit {done.returncode}): {done.stderr[-2000:]!r}")
        result = json.loads(out.read_text())
        phase = result["phases"][0]
        generator = result.get("generator") or {}
        outcomes = phase["outcomes"]
        return ToolView(
            p99_ms=phase["latency_ms"]["ttft" if load.streams else "e2e"]["p99"],
            errors=sum(n for outcome, n in outcomes.items() if outcome not in ("on_time", "late")),
            limited=bool(generator.get("generator_limited")),
            reasons=list(generator.get("reasons") or []),
            extra={
                "max_event_loop_stall_ms": generator.get("max_event_loop_stall_ms"),
                "gc": generator.get("gc"),
                "schedule_lag_p99_ms": (generator.get("schedule_lag_ms") or {}).get("p99"),
            },
        )


class GuideLLM:
    """GuideLLM 0.8.1, ``guidellm run`` with its defaults (10 worker processes, HTTP/2 allowed), fed a JSON
    dataset of the prompt so it needs no tokenizer from the Hugging Face hub; ``validate_backend=false``
    because its validation request is a stream the server would record."""

    name = "guidellm"
    streams = True
    plain = False  # it speaks only OpenAI-style generation APIs
    pinned = True
    exit_ok = frozenset({0})

    def command(self, load: Load) -> Command:
        rows = int(load.rate * load.duration_s * 1.5) + 100  # it stops when the dataset runs out
        data = load.scratch / "data.json"
        data.write_text(json.dumps([{"prompt": PROMPT, "output_tokens_count": load.chunks}] * rows))
        argv = [
            str(install.python_peer("guidellm")), "run",
            "--backend", f"kind=openai_http,target={load.base_url},model=bench,"
            "request_format=/v1/chat/completions,validate_backend=false",
            "--profile", f"kind=constant,rate={load.rate:g}",
            "--constraint", f"kind=max_duration,seconds={load.duration_s:g}",
            "--data", f"kind=json_file,path={data}",
            "--output", f"kind=json,path={load.scratch / 'guidellm.json'}",
            "--disable-console",
        ]  # fmt: skip
        return Command(argv)

    def read(self, load: Load, done: subprocess.CompletedProcess[bytes]) -> ToolView:
        out = load.scratch / "guidellm.json"
        if not out.exists():
            raise SystemExit(f"guidellm wrote no result (exit {done.returncode}): {done.stderr[-2000:]!r}")
        benchmark = json.loads(out.read_text())["benchmarks"][0]
        metrics = benchmark["metrics"]
        ttft = metrics["time_to_first_token_ms"]["successful"]
        totals = metrics["request_totals"]
        return ToolView(
            p99_ms=ttft["percentiles"]["p99"] if ttft["count"] else None,
            errors=int(totals["errored"]),
            extra={
                "successful": totals["successful"],
                "incomplete": totals["incomplete"],
                "targeted_start_delay_avg_ms": 1000
                * benchmark["scheduler_metrics"]["request_targeted_start_delay_avg"],
            },
        )
