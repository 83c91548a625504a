"""Dogfooding: cliffwatch aimed at its own API. A real `cliffwatch serve`, a viewer token, and `cliffwatch run`
of the bundled `self-burst` scenario bursting a read endpoint far past the token's request rate: the excess
must be refused fast (429 at once, so the run's safe-degradation component is at least 0.8) while the
service stays healthy (every /healthz probe during the burst answered within 100 ms). The token reaches the
run by reference (``{secret: env:TARGET_CLIFFWATCH_AUTHORIZATION}``), as a user would give it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from test_service_api import REPO, call, served_instance

pytestmark = pytest.mark.slow

HEALTH_BOUND_S = 0.1
PROBE_EVERY_S = 0.05


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
        result_path = tmp_path / "result.json"
        # The bundled scenario, its token by reference: read from the environment when the run starts.
        env = {**os.environ, "CLIFFWATCH_STATE_DIR": str(tmp_path / "cli-state"), "CLIFFWATCH_LOG_FORMAT": "json",
               "TARGET_CLIFFWATCH_AUTHORIZATION": f"Bearer {viewer['token']}"}  # fmt: skip
        env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)  # the default: loopback, where the service listens
        env.pop("CLIFFWATCH_SECRET_ENV", None)  # the default: TARGET_* may be referenced
        with HealthProbe(base) as probe:
            command = [sys.executable, "-m", "cliffwatch", "run", "self-burst", "--target", base,
                       "--json", str(result_path)]  # fmt: skip
            run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    result = json.loads(result_path.read_text())
    burst = next(p for p in result["phases"] if p["name"] == "burst")
    components = {c["name"]: c for c in result["score"]["components"]}
    safe = components["safe_degradation"]
    assert burst["outcomes"]["shed"] >= 300, burst  # most of the 600 were refused (20/s and a burst of 40 pass)
    # 0.9 held in two clean-clone CI runs and failed the third at 0.83 (73 of 514 refusals over 50 ms, the
    # service and the generator sharing two cores): 0.8 still fails a service that queues its refusals.
    assert safe["value"] >= 0.8, safe["summary"]
    assert not result["capped"]
    assert probe.failures == []
    assert len(probe.took) >= 7 / PROBE_EVERY_S / 2  # probed all along the run
    slowest = max(probe.took)
    assert slowest <= HEALTH_BOUND_S, f"/healthz took up to {slowest * 1000:.0f} ms during the burst"
