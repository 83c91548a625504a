"""Dogfooding: cliffwatch aimed at its own API. A real `cliffwatch serve`, a viewer token, and `cliffwatch run`
bursting a read endpoint far past the token's request rate: the excess must be refused fast (429 at once,
so the run's safe-degradation component is at least 0.9) while the service stays healthy (every /healthz
probe during the burst answered within 100 ms)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_service_api import REPO, call, served_instance

pytestmark = pytest.mark.slow

HEALTH_BOUND_S = 0.1
PROBE_EVERY_S = 0.05


def burst_at(base: str, token: str) -> dict[str, Any]:
    """A calm minute's worth of reads, a burst ten times the token's rate (20/s), and calm again. Until secret
    references land, the viewer token is written into the document; the bundled scenario will refer to it."""

    def phase(name: str, role: str, seconds: float, rate: float) -> dict[str, Any]:
        return {"name": name, "role": role, "duration_s": seconds, "arrival": {"process": "constant", "rate": rate}}

    return {
        "name": "self-burst",
        "description": "A viewer's burst at the service's own read API: the excess must be refused fast.",
        "seed": 10,
        "target": {"url": base, "api": "http",
                   "request": {"method": "GET", "path": "/api/v1/scenarios",
                               "headers": {"Authorization": f"Bearer {token}"}}},
        "slo": {"e2e_ms": 500, "timeout_ms": 2000},
        "client": {"pool_size": 32},
        "phases": [phase("calm", "baseline", 2, 5), phase("burst", "stress", 3, 200), phase("after", "recovery", 2, 5)],
    }  # fmt: skip


class HealthProbe:
    """Asks /healthz every 50 ms from a thread of its own, keeping how long each answer took."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.took: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-probe", daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=5) as response:
                    response.read()
                    if response.status != 200:
                        self.failures.append(f"status {response.status}")
            except OSError as exc:
                self.failures.append(repr(exc))
            self.took.append(time.perf_counter() - started)
            self._stop.wait(PROBE_EVERY_S)


def test_a_viewers_burst_at_the_services_own_api_is_refused_fast_and_health_stays_quick(tmp_path: Path) -> None:
    with served_instance(f"sqlite+aiosqlite:///{tmp_path / 'cw.db'}", tmp_path) as (base, admin):
        status, viewer = call(base, admin, "POST", "/api/v1/tokens", {"name": "dogfood", "role": "viewer"})
        assert status == 201
        scenario = tmp_path / "self-burst.yaml"
        scenario.write_text(yaml.safe_dump(burst_at(base, viewer["token"])))
        result_path = tmp_path / "result.json"
        env = {**os.environ, "CLIFFWATCH_STATE_DIR": str(tmp_path / "cli-state"), "CLIFFWATCH_LOG_FORMAT": "json"}
        env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)  # the default: loopback, where the service listens
        with HealthProbe(base) as probe:
            command = [sys.executable, "-m", "cliffwatch", "run", str(scenario), "--json", str(result_path)]
            run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    result = json.loads(result_path.read_text())
    burst = next(p for p in result["phases"] if p["name"] == "burst")
    components = {c["name"]: c for c in result["score"]["components"]}
    safe = components["safe_degradation"]
    assert burst["outcomes"]["shed"] >= 300, burst  # most of the 600 were refused (20/s and a burst of 40 pass)
    assert safe["value"] >= 0.9, safe["summary"]
    assert not result["capped"]
    assert probe.failures == []
    assert len(probe.took) >= 7 / PROBE_EVERY_S / 2  # probed all along the run
    slowest = max(probe.took)
    assert slowest <= HEALTH_BOUND_S, f"/healthz took up to {slowest * 1000:.0f} ms during the burst"
