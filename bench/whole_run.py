"""The whole run path, measured as a user runs it, with the server's record of arrivals as the yardstick.

``bench/generator_fidelity.py`` measures the generator loop alone, in-process. This benchmark measures what
a user gets: ``cliffwatch run`` as a separate process (start-up, preflight, live progress, the result and
its file included) and, with ``--paths service``, a run queued on a real ``cliffwatch serve`` and executed by
its worker with the SQL sink — each against ``bench/arrivals_server`` (Go, one core, answering in 20 ms and
recording every arrival), beside Vegeta (``--paths vegeta``, installed into ``bench/.build/peers`` with
``go install`` by ``peers/install.py``) measured in the same sitting on the same server.

For each path and constant rate it reports: the rate the **server** saw and its share of the intended
requests, pacing as the server saw it (inter-arrival CV, and the p99 drift of arrivals from an even
schedule), the tool's p99 latency error (its p99 minus the server's known delay), client CPU per request
(the child processes' rusage; for the service the serving process's CPU over the run), and for cliffwatch
its own verdict (generator limited or not, with reasons), its longest event-loop stall and its garbage
collections. A rate is **held** when the server saw ≥ 99 % of the intended requests and the tool did not
flag itself; **faithful (N ms)** when also p99 latency error ≤ N ms (5 and 10).

    .venv/bin/python bench/whole_run.py --rates 500,1000,2000 --duration 20 --json whole.json
    .venv/bin/python bench/whole_run.py --paths cli,service,vegeta --rates 250,500,1000
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arrivals import BENCH, ArrivalsServer, arrivals_server, judge_arrivals, pinned
from peers import install

REPO = BENCH.parent


@dataclass
class Mode:
    chunks: int = 0  # 0: plain HTTP; else token chunks per streamed answer
    # Each tool in a session of its own, as ``peers/compare.py`` starts it: with the kernel's autogroups on, a
    # session's processes share one scheduling group, so the server (in the bench's session) is weighed
    # against all of a tool's processes together, not against each (docs/performance.md).
    own_session: bool = False


MODE = Mode()
CLIENT_CORE = 0
DEFAULT_RATES = (250, 500, 1000, 1500, 2000, 3000, 4000)
# the caps' defaults (1,000 req/s) are a safety net for users; the benchmark lifts them for its loopback server
CAPS = {"CLIFFWATCH_MAX_OFFERED_RATE": "20000", "CLIFFWATCH_MAX_ATTEMPT_RATE": "20000",
        "CLIFFWATCH_MAX_DOCUMENTS_PER_TOKEN": "10000", "CLIFFWATCH_MAX_QUEUED_RUNS_PER_TOKEN": "100"}  # fmt: skip


@dataclass
class Pass:
    path: str
    rate: float
    server: dict[str, Any]
    p99_ms: float | None
    latency_error_p99_ms: float | None
    cpu_ms_per_request: float | None
    limited: bool
    reasons: list[str] = field(default_factory=list)
    tool: dict[str, Any] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return float(self.server["share"]) >= 0.99 and not self.limited

    def faithful(self, bound_ms: float) -> bool:
        return self.held and self.latency_error_p99_ms is not None and self.latency_error_p99_ms <= bound_ms


def scenario_document(
    base_url: str, rate: float, duration_s: float, chunks: int = 0, workers: str | None = None
) -> dict[str, Any]:
    """A one-phase constant-rate scenario: plain ``GET /load``, or with ``chunks`` an OpenAI chat stream of
    that many token chunks (64-word prompts); ``workers``: its ``client.workers``."""
    target: dict[str, Any] = {"url": base_url, "api": "http", "request": {"method": "GET", "path": "/load"}}
    if chunks:
        target = {"url": base_url, "api": "openai-chat",
                  "request": {"model": "bench", "prompt_tokens": 64, "max_tokens": chunks}}  # fmt: skip
    return {
        "name": "bench-whole-run",
        "seed": 1,
        "slo": {"e2e_ms": 10_000, "timeout_ms": 10_000},
        "target": target,
        "client": {"pool_size": 1000, "max_in_flight": 10_000, **({"workers": _count(workers)} if workers else {})},
        "phases": [
            {"name": "load", "role": "baseline", "duration_s": duration_s,
             "arrival": {"process": "constant", "rate": rate}},
        ],
    }  # fmt: skip


def _count(workers: str) -> int | str:
    return workers if workers == "auto" else int(workers)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def from_result(path: str, rate: float, result: dict[str, Any], view: dict[str, Any], cpu_s: float,
                latency_ms: float) -> Pass:  # fmt: skip
    """The latency error is e2e's for plain HTTP, TTFT's for streams (the server's delay is its time to the
    first token chunk)."""
    generator = result.get("generator") or {}
    phase = result["phases"][0]
    p99 = phase["latency_ms"]["ttft" if MODE.chunks else "e2e"]["p99"]
    sent = max(1, int(phase.get("sent") or view["received"]))
    return Pass(
        path=path,
        rate=rate,
        server=view,
        p99_ms=p99,
        latency_error_p99_ms=None if p99 is None else p99 - latency_ms,
        cpu_ms_per_request=1000 * cpu_s / sent,
        limited=bool(generator.get("generator_limited")),
        reasons=list(generator.get("reasons") or []),
        tool={
            "schedule_lag_p99_ms": (generator.get("schedule_lag_ms") or {}).get("p99"),
            "max_event_loop_stall_ms": generator.get("max_event_loop_stall_ms"),
            "cpu_busy": generator.get("cpu_busy"),
            "gc": generator.get("gc"),
            "outcomes": phase["outcomes"],
            "workers": len(generator.get("workers") or []),  # processes that sent; 0: the run's own
        },
    )


# --- the paths ----------------------------------------------------------------------------------------


def run_cli(server: ArrivalsServer, rate: float, duration_s: float, latency_ms: float, workers: str | None = None,
            ray: str | None = None, loop: bool = False) -> Pass:  # fmt: skip
    """``cliffwatch run`` pinned to the client's core; with ``workers`` (path ``cli-wN``, ``cli-wauto``) it
    runs with ``client.workers`` and is not pinned: its workers may use every core, the server's too. With
    ``ray`` (path ``cli-rayN``) the workers are Ray actors on the bench's local cluster at that address. With
    ``loop`` (path ``loop``) the same scenario is sent by the generator loop alone (``bench/loop_pass.py``),
    pinned the same way: the yardstick for the run path's own cost."""
    with tempfile.TemporaryDirectory() as scratch:
        scenario = Path(scratch) / "scenario.json"  # YAML is a superset of JSON
        document = scenario_document(server.base_url, rate, duration_s, MODE.chunks, workers)
        scenario.write_text(json.dumps(document))
        out = Path(scratch) / "result.json"
        server.drain()
        before = children_cpu_s()
        argv = [str(REPO / ".venv/bin/cliffwatch"), "run", str(scenario), "--json", str(out)]
        argv += ["--ray", ray] if ray else []
        if loop:
            argv = [sys.executable, str(BENCH / "loop_pass.py"), str(scenario), str(out)]
        command = argv if workers else pinned(argv, CLIENT_CORE)
        done = subprocess.run(command, cwd=REPO, env={**os.environ, **CAPS}, capture_output=True, text=True,
                              timeout=duration_s + 300, start_new_session=MODE.own_session)  # fmt: skip
        cpu = children_cpu_s() - before
        if not out.exists():
            raise SystemExit(f"cliffwatch run wrote no result (exit {done.returncode}): {done.stderr[-2000:]}")
        view = judge_arrivals(server.drain(), rate, duration_s).to_dict()
        path = (f"cli-ray{workers}" if ray else f"cli-w{workers}") if workers else ("loop" if loop else "cli")
        result = json.loads(out.read_text())
        if ray:  # Ray's actors are not this process's children: their CPU is what each measured over the run
            workers_cpu = [w.get("cpu_busy") or 0.0 for w in (result.get("generator") or {}).get("workers") or []]
            cpu += sum(workers_cpu) * float(result.get("duration_s") or duration_s)
        return from_result(path, rate, result, view, cpu, latency_ms)


@contextmanager
def local_ray(nodes: int) -> Iterator[str]:
    """A Ray cluster of ``nodes`` nodes of one CPU each on this machine (``ray.cluster_utils.Cluster``, as
    cliffwatch's tests use): its address. The raylets are not pinned, as the workers of ``cli-wN`` are not."""
    from ray.cluster_utils import Cluster

    store = 80 * 1024 * 1024
    head = {"num_cpus": 1, "object_store_memory": store, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1, object_store_memory=store)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


@contextmanager
def served(scratch: Path, *, pin: bool = True) -> Iterator[tuple[str, str, int]]:
    """A ``cliffwatch serve`` on SQLite and a free port, pinned to the client's core unless ``pin`` is false
    (its runs start worker processes, which inherit its affinity): URL, token, pid."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "CLIFFWATCH_DATABASE_URL": f"sqlite+aiosqlite:///{scratch / 'cw.db'}",
           "CLIFFWATCH_STATE_DIR": str(scratch / "state"), "CLIFFWATCH_LISTEN_PORT": str(port),
           "CLIFFWATCH_LOG_FORMAT": "json", **CAPS}  # fmt: skip
    cli = str(REPO / ".venv/bin/cliffwatch")
    token = subprocess.run([cli, "token", "create", "--role", "admin"], env=env, capture_output=True, text=True,
                           check=True, timeout=60).stdout.strip()  # fmt: skip
    log = (scratch / "serve.log").open("w")
    argv = pinned([cli, "serve"], CLIENT_CORE) if pin else [cli, "serve"]
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=MODE.own_session)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while call(f"http://127.0.0.1:{port}", None, "GET", "/readyz")[0] != 200:
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit(f"cliffwatch serve did not start: see {scratch / 'serve.log'}")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", token, process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def call(base: str, token: str | None, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")
    except OSError:
        return 0, None


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def service_runner(
    scratch: Path, workers: str | None = None
) -> Iterator[Callable[[ArrivalsServer, float, float, float], Pass]]:
    """Runs queued on one ``cliffwatch serve``; with ``workers`` (path ``service-wN``, ``service-wauto``) they
    ask for ``client.workers`` and the service is not pinned, as ``cli-wN`` is not."""
    path = f"service-w{workers}" if workers else "service"
    (scratch / path).mkdir()
    with served(scratch / path, pin=workers is None) as (base, token, pid):

        def run_service(server: ArrivalsServer, rate: float, duration_s: float, latency_ms: float) -> Pass:
            server.drain()
            before = process_cpu_s(pid)
            document = scenario_document(server.base_url, rate, duration_s, MODE.chunks, workers)
            status, run = call(base, token, "POST", "/api/v1/runs", {"document": document})
            if status != 202:
                raise SystemExit(f"the service refused the run: {status} {run}")
            deadline = time.monotonic() + duration_s + 300
            while (current := call(base, token, "GET", f"/api/v1/runs/{run['id']}")[1])["status"] in (
                "queued",
                "running",
            ):
                if time.monotonic() > deadline:
                    raise SystemExit(f"the service's run {run['id']} did not finish")
                time.sleep(0.5)
            cpu = process_cpu_s(pid) - before
            if current["result"] is None:
                raise SystemExit(f"the service's run ended {current['status']}: {current.get('reason')}")
            result = current["result"]
            # the worker processes are the service's children, reaped (if ever) after the run: their CPU is
            # what each measured over the run, as for Ray's actors
            for worker in (result.get("generator") or {}).get("workers") or []:
                cpu += (worker.get("cpu_busy") or 0.0) * float(result.get("duration_s") or duration_s)
            view = judge_arrivals(server.drain(), rate, duration_s).to_dict()
            return from_result(path, rate, result, view, cpu, latency_ms)

        yield run_service


def run_vegeta(server: ArrivalsServer, rate: float, duration_s: float, latency_ms: float) -> Pass:
    binary = str(install.vegeta())
    server.drain()
    before = children_cpu_s()
    attack = subprocess.run(
        pinned([binary, "attack", f"-rate={rate:g}/s", f"-duration={duration_s:g}s", "-timeout=10s"], CLIENT_CORE),
        input=f"GET {server.base_url}/load\n".encode(), capture_output=True, check=True, timeout=duration_s + 120,
        start_new_session=MODE.own_session,
    )  # fmt: skip
    report = subprocess.run([binary, "report", "-type=json"], input=attack.stdout, capture_output=True, check=True)
    cpu = children_cpu_s() - before
    view = judge_arrivals(server.drain(), rate, duration_s).to_dict()
    figures = json.loads(report.stdout)
    p99 = figures["latencies"]["99th"] / 1e6
    requests = max(1, int(figures["requests"]))
    return Pass(path="vegeta", rate=rate, server=view, p99_ms=p99, latency_error_p99_ms=p99 - latency_ms,
                cpu_ms_per_request=1000 * cpu / requests, limited=False,
                tool={"success": figures["success"], "status_codes": figures["status_codes"]})  # fmt: skip


# --- the report -----------------------------------------------------------------------------------------


def line(p: Pass) -> str:
    s = p.server
    gc = p.tool.get("gc") or {}
    flag = "held" if p.held else "NOT held"
    if p.faithful(5):
        flag = "faithful ≤5 ms"
    elif p.faithful(10):
        flag = "faithful ≤10 ms"
    error = "–" if p.latency_error_p99_ms is None else f"{p.latency_error_p99_ms:8.1f}"
    cv = "–" if s["interarrival_cv"] is None else f"{s['interarrival_cv']:.2f}"
    drift = "–" if s["drift_p99_ms"] is None else f"{s['drift_p99_ms']:.1f}"
    stall = p.tool.get("max_event_loop_stall_ms")
    gcs = f"{gc.get('collections', '–')}/{gc.get('max_pause_ms', '–')}" if gc else "–"
    cpu = "–" if p.cpu_ms_per_request is None else f"{p.cpu_ms_per_request:.3f}"
    return (f"{p.path:13} {p.rate:7g} {s['seen_rate']:9.1f} {100 * s['share']:6.1f}% {cv:>5} {drift:>9} "
            f"{error:>9} {cpu:>8} {'–' if stall is None else f'{stall:.0f}':>6} {gcs:>10}  {flag}"
            + (f"  ({'; '.join(p.reasons)})" if p.reasons else ""))  # fmt: skip


HEADER = (
    "path             rate  srv rate  share   cv  drift p99  err p99  cpu/req  stall  gc n/max  verdict\n"
    "                        (req/s)              (ms)       (ms)     (ms)    (ms)   (ms)"
)


def highest(passes: list[Pass], path: str, test: Callable[[Pass], bool], *, most: bool = False) -> float | None:
    """The highest rate at and below which every pass of ``path`` passed ``test`` (``most``: more than half
    of the passes at each rate did: a rate tried several times in a sitting is judged on its majority, so
    one pass a busy moment of the machine spoiled does not decide)."""
    rates = sorted({p.rate for p in passes if p.path == path})
    best = None
    for rate in rates:
        verdicts = [test(p) for p in passes if p.path == path and p.rate == rate]
        if sum(verdicts) > len(verdicts) / 2 if most else all(verdicts):
            best = rate
        else:
            break
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default=",".join(str(r) for r in DEFAULT_RATES))
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per pass")
    parser.add_argument("--paths", default="cli,vegeta",
                        help="of cli, cli-wN (client.workers: N), cli-wauto, cli-rayN (N Ray actors on a local "
                        "cluster of N nodes), service, service-wN, service-wauto, vegeta, loop (the generator "
                        "loop alone)")  # fmt: skip
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--chunks", type=int, default=0,
                        help="stream OpenAI chat answers of this many token chunks, 2 ms apart (0: plain HTTP); "
                        "the latency error is then TTFT's; Vegeta cannot read streams and is not run")  # fmt: skip
    parser.add_argument("--own-session", action="store_true",
                        help="start each tool in a session of its own (as peers/compare.py does): with autogroup "
                        "scheduling its processes are then weighed together against the server")  # fmt: skip
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    paths = [p.strip() for p in args.paths.split(",")]
    MODE.chunks, MODE.own_session = args.chunks, args.own_session
    if args.chunks and "vegeta" in paths:
        paths.remove("vegeta")
    if not (REPO / ".venv/bin/cliffwatch").exists():
        raise SystemExit("run `make check` first: the benchmark runs the repository's .venv/bin/cliffwatch")
    passes: list[Pass] = []
    ray_nodes = max((int(p.removeprefix("cli-ray")) for p in paths if p.startswith("cli-ray")), default=0)
    with (
        tempfile.TemporaryDirectory() as scratch,
        arrivals_server(args.latency_ms, chunks=args.chunks or 16) as server,
        local_ray(ray_nodes) if ray_nodes else nullcontext("") as ray_address,
    ):
        runners: dict[str, Callable[[ArrivalsServer, float, float, float], Pass]] = {
            "cli": run_cli, "loop": functools.partial(run_cli, loop=True), "vegeta": run_vegeta}  # fmt: skip
        for path in paths:
            if path.startswith("cli-w"):
                runners[path] = functools.partial(run_cli, workers=path.removeprefix("cli-w"))
            elif path.startswith("cli-ray"):
                runners[path] = functools.partial(run_cli, workers=path.removeprefix("cli-ray"), ray=ray_address)
        services = {p: service_runner(Path(scratch), p.removeprefix("service-w") if p != "service" else None)
                    for p in paths if p.startswith("service")}  # fmt: skip
        for path, service in services.items():
            runners[path] = next(service)
        server_cpu = server.cpu_s()
        print(HEADER, flush=True)
        for index, rate in enumerate(rates):
            order = paths if index % 2 == 0 else list(reversed(paths))  # neither always runs first
            for path in order:
                passes.append(runners[path](server, rate, args.duration, args.latency_ms))
                print(line(passes[-1]), flush=True)
        server_cpu = server.cpu_s() - server_cpu
        for service in services.values():
            service.close()
    summary = {
        path: {
            "highest_held": highest(passes, path, lambda p: p.held),
            "highest_faithful_5ms": highest(passes, path, lambda p: p.faithful(5)),
            "highest_faithful_10ms": highest(passes, path, lambda p: p.faithful(10)),
            "highest_held_mostly": highest(passes, path, lambda p: p.held, most=True),
            "highest_faithful_10ms_mostly": highest(passes, path, lambda p: p.faithful(10), most=True),
            "held_passes": {
                f"{rate:g}": f"{sum(p.held for p in passes if p.path == path and p.rate == rate)}/"
                f"{sum(1 for p in passes if p.path == path and p.rate == rate)}"
                for rate in sorted({p.rate for p in passes if p.path == path})
            },
        }
        for path in paths
    }
    print(f"\nserver CPU over the benchmark: {server_cpu:.1f} s")
    for path, figures in summary.items():
        print(
            f"{path:13} "
            + ", ".join(f"{k} {v:g}" if v else f"{k} –" for k, v in figures.items() if not isinstance(v, dict))
        )
        print(f"{'':13} held in: " + ", ".join(f"{rate} {held}" for rate, held in figures["held_passes"].items()))
    if "vegeta" in summary and summary["vegeta"]["highest_held"]:
        for path in (p for p in paths if p != "vegeta"):
            held = summary[path]["highest_held"] or 0
            print(f"{path} / vegeta, highest held rate: {held / summary['vegeta']['highest_held']:.3f}")
    for path in (p for p in paths if "loop" in summary and p not in ("loop", "vegeta")):
        for figure in ("highest_held", "highest_faithful_10ms", "highest_held_mostly", "highest_faithful_10ms_mostly"):
            loop_rate, rate = summary["loop"][figure], summary[path][figure] or 0
            if loop_rate:
                print(f"{path} / loop, {figure.replace('_', ' ')}: {rate / loop_rate:.3f}")
    if args.json_path:
        document = {"rates": rates, "duration_s": args.duration, "latency_ms": args.latency_ms, "chunks": args.chunks,
                    "python": sys.version.split()[0], "cores": os.cpu_count(), "taskset": bool(shutil.which("taskset")),
                    "own_session": args.own_session, "passes": [p.__dict__ for p in passes],
                    "summary": summary}  # fmt: skip
        Path(args.json_path).write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
