"""The command line as people and pipelines use it: exit codes, messages, files written."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenizer_kit import train_tokenizer

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = tempfile.mkdtemp(prefix="cliffwatch-cli-state-")  # never the developer's own fault ledger

# A short scenario on a small, fast built-in target: three phases, about six seconds in all.
QUICK = {
    "name": "quick",
    "description": "a short healthy run",
    "seed": 3,
    "target": {
        "url": "builtin",
        "builtin": {"max_batch": 8, "decode_base_ms": 5, "decode_per_seq_ms": 0.5},
        "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 8},
    },
    "slo": {"ttft_ms": 500, "e2e_ms": 1000, "timeout_ms": 3000},
    "phases": [
        {"name": "base", "role": "baseline", "duration_s": 2, "arrival": {"process": "poisson", "rate": 5}},
        {"name": "push", "role": "stress", "duration_s": 2, "arrival": {"process": "poisson", "rate": 10}},
        {"name": "calm", "role": "recovery", "duration_s": 2, "arrival": {"process": "poisson", "rate": 5}},
    ],
}


def cliffwatch(*args: str, timeout: float = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_STATE_DIR": STATE_DIR, **(env or {})}
    env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)
    return subprocess.run(
        [sys.executable, "-m", "cliffwatch", *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env, check=False,
    )  # fmt: skip


def write(tmp_path: Path, document: object, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_validate_accepts_every_bundled_scenario() -> None:
    """`cliffwatch validate` exits 0 for the bundled scenarios and says ok for each."""
    files = sorted(str(p) for p in (REPO / "scenarios").glob("*.yaml"))
    result = cliffwatch("validate", *files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": ok (") == len(files)


def test_validate_rejects_a_bad_file_with_path_qualified_messages(tmp_path: Path) -> None:
    """A bad file makes `validate` exit 1 and name each problem's field and reason."""
    bad = json.loads(json.dumps(QUICK))
    bad["phases"][1]["arrival"]["rate"] = 0
    bad["slo"]["timeout_ms"] = 10
    bad["client"] = {"pool_sise": 3}
    result = cliffwatch("validate", str(write(tmp_path, bad)))
    assert result.returncode == 1
    assert "phases[1].arrival.rate: must be > 0" in result.stdout
    assert "slo.timeout_ms: must be >= e2e_ms" in result.stdout
    assert "client.pool_sise: unknown key" in result.stdout


def validate_in(directory: Path, file: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``cliffwatch validate file`` run from ``directory``: data paths are relative to the working directory."""
    return subprocess.run(
        [sys.executable, "-m", "cliffwatch", "validate", str(file)], capture_output=True, text=True, timeout=60,
        cwd=directory, env={**os.environ, "CLIFFWATCH_STATE_DIR": STATE_DIR, **(env or {})}, check=False,
    )  # fmt: skip


def test_validate_names_a_tokenizer_that_cannot_be_used_with_its_field(tmp_path: Path) -> None:
    """The files a scenario names are checked too: missing, outside CLIFFWATCH_DATA_DIRS, not a tokenizer."""
    document = json.loads(json.dumps(QUICK))
    document["target"] = {"url": "http://127.0.0.1:8000", "request": {"model": "m", "tokenizer": "missing/tok"}}
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "tokenizer.json").write_text("{not a tokenizer", encoding="utf-8")
    cases = [
        ("missing/tok", {}, "target.request.tokenizer: missing/tok does not exist"),
        ("junk", {}, "target.request.tokenizer: tokenizer.json is not a Hugging Face tokenizer (Exception)"),
        ("junk", {"CLIFFWATCH_DATA_DIRS": "/nowhere"}, "outside the directories data files may be read from"),
    ]
    for path, env, message in cases:
        document["target"]["request"]["tokenizer"] = path
        file = write(tmp_path, document)
        result = validate_in(tmp_path, file, env)
        assert result.returncode == 1, (path, result.stdout, result.stderr)
        assert message in result.stdout, result.stdout


def test_validate_reads_the_traces_and_datasets_a_scenario_names(tmp_path: Path) -> None:
    """A trace with a bad record and a dataset that is not JSON are named with their fields and lines."""
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,x,3\n")
    (tmp_path / "d.json").write_text("[not json")
    document = json.loads(json.dumps(QUICK))
    document["phases"][1]["arrival"] = {"process": "trace", "path": "t.csv", "format": "azure"}
    document["target"] = {"url": "http://127.0.0.1:8000",
                          "request": {"model": "m", "dataset": {"path": "d.json", "format": "sharegpt"}}}  # fmt: skip
    result = validate_in(tmp_path, write(tmp_path, document))
    assert result.returncode == 1, result.stdout
    assert "phases[1].arrival.path: t.csv, line 2: ContextTokens must be a whole number of tokens" in result.stdout
    document["phases"][1]["arrival"] = {"process": "poisson", "rate": 10}
    result = validate_in(tmp_path, write(tmp_path, document))
    assert result.returncode == 1, result.stdout
    assert "target.request.dataset.path: d.json: is not JSON" in result.stdout


def test_a_trace_request_over_a_cap_is_refused_by_validate_and_run_naming_its_line_and_the_cap(
    tmp_path: Path,
) -> None:
    """A JSON-lines trace whose fourth line asks for a 5,000,000-token prompt (it would have sent a 30 MB body): both
    `validate` and `run` exit 2 naming the file's line, the field and the cap, never the value; `run` sends nothing
    (the target is a closed port: the refusal comes first)."""
    records = [{"time_s": i * 0.1, "prompt_tokens": 16, "output_tokens": 8} for i in range(5)]
    records[3]["prompt_tokens"] = 5_000_000
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    document = json.loads(json.dumps(QUICK))
    document["phases"] = [{"name": "replay", "role": "baseline", "duration_s": 1,
                           "arrival": {"process": "trace", "path": "t.jsonl", "format": "jsonl"}}]  # fmt: skip
    document["target"] = {"url": f"http://127.0.0.1:{closed_port()}", "request": {"model": "m"}}
    path = write(tmp_path, document)
    expected = ("phases[0].arrival.path: t.jsonl line 4: prompt_tokens is over the cap of 131,072 tokens a request "
                "(CLIFFWATCH_MAX_PROMPT_TOKENS)")  # fmt: skip
    for command in ("validate", "run"):
        result = validate_in(tmp_path, path) if command == "validate" else subprocess.run(
            [sys.executable, "-m", "cliffwatch", "run", str(path)], capture_output=True, text=True, timeout=90,
            cwd=tmp_path, env={**os.environ, "CLIFFWATCH_STATE_DIR": STATE_DIR}, check=False)  # fmt: skip
        assert result.returncode == 2, command + result.stdout + result.stderr
        assert expected in result.stdout + result.stderr, command
        assert "5000000" not in result.stdout + result.stderr
        assert "5,000,000" not in result.stdout + result.stderr


def test_a_dataset_entry_over_a_cap_is_refused_by_validate_naming_its_line_and_field(tmp_path: Path) -> None:
    """A JSON-lines dataset whose third entry asks for 50,000,000 tokens of answer, and whose second is a
    300,000-word prompt: both used to be sent as they were. `validate` exits 2 naming each line, field and cap."""
    entries = [
        {"prompt": "hello there"},
        {"prompt": "word " * 300_000},
        {"prompt": "and now", "max_tokens": 50_000_000},
    ]
    (tmp_path / "users.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    document = json.loads(json.dumps(QUICK))
    document["target"]["request"] = {"model": "sim-llm", "dataset": {"path": "users.jsonl", "format": "jsonl"}}
    result = validate_in(tmp_path, write(tmp_path, document))
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("target.request.dataset.path: users.jsonl line 2: prompt is over the cap of 131,072 tokens a request "
            "(CLIFFWATCH_MAX_PROMPT_TOKENS)") in result.stdout  # fmt: skip
    assert ("target.request.dataset.path: users.jsonl line 3: max_tokens is over the cap of 32,768 tokens a request "
            "(CLIFFWATCH_MAX_OUTPUT_TOKENS)") in result.stdout  # fmt: skip
    assert "50,000,000" not in result.stdout
    assert "50000000" not in result.stdout


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "its chat_template took longer than 1 s to render (CLIFFWATCH_TEMPLATE_RENDER_S)"),
        ("{{ 'a' * 10**8 }}", "its chat_template would build something of more than 1,000,000 characters or items "
         "(CLIFFWATCH_TEMPLATE_MAX_CHARS: 1,000,000)"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "its chat_template did what Jinja's sandbox forbids"),
    ],
)  # fmt: skip
def test_a_chat_template_that_would_hold_the_service_is_a_problem_of_the_tokenizer_field(
    tmp_path: Path, template: str, message: str
) -> None:
    """A tokenizer's chat template with a loop of ten billion steps froze the service (one of ten million held its
    loop 8.4 s), a 100 MB string was built, and a sandbox escape was an internal error: each is now a validation
    problem, found within its bound."""
    directory = train_tokenizer(tmp_path / "tok")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    document = json.loads(json.dumps(QUICK))
    document["target"]["request"]["tokenizer"] = "tok"
    started = time.monotonic()
    result = validate_in(tmp_path, write(tmp_path, document))
    assert time.monotonic() - started < 30
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"target.request.tokenizer: tokenizer_config.json: {message}" in result.stdout, result.stdout
    assert "internal error" not in result.stdout + result.stderr


def test_run_writes_a_complete_result_and_exits_by_the_score(tmp_path: Path) -> None:
    """`run --json` writes phases, the time series, the score with components and the generator verdict;
    the exit code follows the pass/fail it records."""
    out = tmp_path / "out.json"
    result = cliffwatch("run", str(write(tmp_path, QUICK)), "--json", str(out))
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(out.read_text())
    assert result.returncode == (0 if document["passed"] else 1)
    assert document["status"] == "succeeded"
    assert [p["name"] for p in document["phases"]] == ["base", "push", "calm"]
    assert sum(p["offered"] for p in document["phases"]) > 20
    assert all(p["outcomes"]["error"] == 0 for p in document["phases"]), document["phases"]
    assert len(document["timeseries"]) >= 6
    assert document["score_version"] == document["score"]["version"]
    components = {c["name"]: c for c in document["score"]["components"]}
    assert set(components) == {"preservation", "safe_degradation", "recovery", "retry_containment", "isolation"}
    assert components["isolation"]["value"] is None  # no traffic classes: not applicable, weights renormalised
    assert isinstance(document["generator"]["generator_limited"], bool)
    assert document["scenario"]["content_hash"]
    assert "quick" in result.stdout
    assert "score" in result.stdout


@pytest.mark.slow
def test_run_with_workers_sends_from_worker_processes_and_says_what_each_sent(tmp_path: Path) -> None:
    """`run --workers 2`: two processes share the plan, every planned request is accounted for once."""
    out = tmp_path / "out.json"
    result = cliffwatch("run", str(write(tmp_path, QUICK)), "--workers", "2", "--json", str(out))
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(out.read_text())
    assert document["status"] == "succeeded"
    workers = document["generator"]["workers"]
    assert [w["index"] for w in workers] == [0, 1]
    assert len({w["pid"] for w in workers}) == 2
    offered = sum(p["offered"] for p in document["phases"])
    assert sum(w["planned"] for w in workers) == sum(w["finished"] for w in workers) == offered > 20
    assert abs(workers[0]["planned"] - workers[1]["planned"]) <= 1
    assert all(w["failure"] is None and w["lost"] == 0 for w in workers)
    assert all(p["outcomes"]["error"] == 0 and p["outcomes"]["not_sent"] == 0 for p in document["phases"])


def test_run_refuses_a_target_outside_the_allowlist_before_sending(tmp_path: Path) -> None:
    """A non-loopback target is refused with exit code 2 and a message naming the setting."""
    result = cliffwatch("run", str(write(tmp_path, QUICK)), "--target", "http://192.0.2.10:8000")
    assert result.returncode == 2
    assert "not in the target allowlist" in result.stderr
    assert "CLIFFWATCH_ALLOWED_TARGETS" in result.stderr


def test_run_and_sweep_apply_the_services_caps_before_sending(tmp_path: Path) -> None:
    """`cliffwatch run` and `cliffwatch sweep` judge the worst case against the same caps as the service:
    over them, exit code 2 naming the field, the worst case and the cap, and nothing started."""
    flood = json.loads(json.dumps(QUICK))
    flood["client"] = {"retry": {"policy": "immediate", "max_retries": 100}}
    path = str(write(tmp_path, flood))
    env = {"CLIFFWATCH_MAX_OFFERED_RATE": "10"}
    run = cliffwatch("run", path, env=env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "client.retry.max_retries: phase 'push' may send up to 1010 attempts/s" in run.stderr
    assert "at most 10 attempts/s" in run.stderr
    assert "starting the built-in" not in run.stdout + run.stderr
    sweep = cliffwatch("sweep", str(write(tmp_path, QUICK, "quick.yaml")), "--concurrency", "--from", "1", "--to",
                       "50", env={"CLIFFWATCH_MAX_CONCURRENCY": "20"})  # fmt: skip
    assert sweep.returncode == 2, sweep.stdout + sweep.stderr
    assert "sweep.stop: the sweep may run up to 50 clients at once; this service runs at most 20" in sweep.stderr


def test_run_against_an_unreachable_target_fails_fast_without_load(tmp_path: Path) -> None:
    """A target that does not answer gives exit code 3 and says no load was sent."""
    started = time.monotonic()
    result = cliffwatch("run", str(write(tmp_path, QUICK)), "--target", f"http://127.0.0.1:{closed_port()}")
    assert result.returncode == 3
    assert "unreachable, no load was sent" in result.stderr
    assert time.monotonic() - started < 30


def test_run_of_a_fault_scenario_with_an_unreachable_toxiproxy_fails_fast(tmp_path: Path) -> None:
    """slow-backend with a Toxiproxy that does not answer: exit 3, the server named, no run started."""
    url = f"http://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    result = cliffwatch(
        "run", "slow-backend", env={"CLIFFWATCH_TOXIPROXY_URL": url, "CLIFFWATCH_STATE_DIR": str(tmp_path)}
    )
    assert result.returncode == 3
    assert url in result.stderr
    assert "phase baseline" not in result.stderr
    assert time.monotonic() - started < 30


def test_run_of_a_fault_scenario_with_a_hanging_toxiproxy_gives_up_within_the_timeout(tmp_path: Path) -> None:
    """A Toxiproxy that accepts connections and never answers is given up on within the configured timeout
    (three attempts of 0.5 s), with exit 3 and the reason."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        result = cliffwatch(
            "run", "slow-backend",
            env={"CLIFFWATCH_TOXIPROXY_URL": url, "CLIFFWATCH_TOXIPROXY_TIMEOUT_S": "0.5",
                 "CLIFFWATCH_STATE_DIR": str(tmp_path)},
        )  # fmt: skip
        elapsed = time.monotonic() - started
    assert result.returncode == 3
    assert url in result.stderr
    assert "phase baseline" not in result.stderr
    assert elapsed < 15


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "no-such-scenario"], "not a bundled scenario"),
        (["run", "burst-storm", "--seed", "-1"], "--seed: must be >= 0"),
        (["run", "burst-storm", "--threshold", "101"], "--threshold: must be <= 100"),
        (["run", "burst-storm", "--target", "ftp://127.0.0.1"], "--target: must be 'builtin' or an http(s) URL"),
    ],
)
def test_invalid_input_exits_2_with_a_clear_message(args: list[str], message: str) -> None:
    """Bad arguments are input errors: exit code 2 and the reason, never a traceback."""
    result = cliffwatch(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def interrupted_run(tmp_path: Path, client: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 60-s run interrupted a second into its first phase by Ctrl-C, sent to its whole process group as a
    terminal sends it; the result it wrote, once it exited with 130."""
    long_run = json.loads(json.dumps(QUICK))
    long_run["phases"][0]["duration_s"] = 60
    if client is not None:
        long_run["client"] = client
    out = tmp_path / "out.json"
    env = {**os.environ, "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_STATE_DIR": STATE_DIR}
    process = subprocess.Popen(
        [sys.executable, "-m", "cliffwatch", "run", str(write(tmp_path, long_run)), "--json", str(out)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert process.stderr is not None
    for line in process.stderr:
        if "phase base" in line:
            break
    time.sleep(1.0)
    os.killpg(process.pid, signal.SIGINT)
    _stdout, _ = process.communicate(timeout=30)
    assert process.returncode == 130
    document: dict[str, Any] = json.loads(out.read_text())
    return document


def test_interrupting_a_run_stops_it_and_records_it_as_interrupted(tmp_path: Path) -> None:
    """Ctrl-C stops the run promptly; the result is written with status interrupted; exit code 130."""
    document = interrupted_run(tmp_path)
    assert document["status"] == "interrupted"
    assert document["duration_s"] < 30
    assert any(v["name"] == "interrupted" for v in document["verdicts"])


@pytest.mark.slow
def test_interrupting_a_run_with_workers_stops_every_worker(tmp_path: Path) -> None:
    """The coordinator stops its workers on Ctrl-C (they ignore it themselves): the run is recorded as
    interrupted and no worker process is left."""
    document = interrupted_run(tmp_path, {"workers": 2})
    assert document["status"] == "interrupted"
    assert [w["failure"] for w in document["generator"]["workers"]] == [None, None]
    for worker in document["generator"]["workers"]:
        with pytest.raises(ProcessLookupError):
            os.kill(worker["pid"], 0)


def test_target_command_serves_the_simulator_on_the_port_it_reports() -> None:
    """`cliffwatch target --port 0` prints the URL it bound and answers /health there."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cliffwatch", "target", "--port", "0", "--max-batch", "4"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "listening on http://127.0.0.1:" in line
        assert "max_batch 4" in line
        url = line.split("listening on ", 1)[1].split()[0]
        import urllib.request

        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            assert response.status == 200
    finally:
        process.terminate()
        process.communicate(timeout=10)


def test_target_command_rejects_bad_parameters() -> None:
    """A bad simulator parameter is named with its reason and exit code 2."""
    result = cliffwatch("target", "--port", "0", "--max-batch", "zero")
    assert result.returncode == 2
    assert "max_batch" in result.stderr


def test_target_reads_a_config_file_and_flags_override_it(tmp_path: Path) -> None:
    """`--config` sets the simulator's parameters from a file; a flag given too wins over the file."""
    config = tmp_path / "target.yaml"
    config.write_text("max_batch: 8\nadmission: queue_limit\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "cliffwatch", "target", "--port", "0", "--config", str(config), "--max-batch", "2"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "max_batch 2" in line
        assert "admission queue_limit" in line
    finally:
        process.terminate()
        process.communicate(timeout=10)
