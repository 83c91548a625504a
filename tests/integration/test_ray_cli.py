"""`cliffwatch run --ray ADDRESS`: the run's load sent from Ray actors on a local cluster of two nodes
(``ray_cluster``), the result saying what each node sent; an address where no Ray head answers is a clear
error before any load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import QUICK, cliffwatch, closed_port, write

from ray_kit import LocalRay

pytestmark = pytest.mark.slow


def test_run_with_ray_sends_from_an_actor_on_each_node(tmp_path: Path, ray_cluster: LocalRay) -> None:
    out = tmp_path / "out.json"
    result = cliffwatch("run", str(write(tmp_path, QUICK)), "--ray", ray_cluster.address, "--json", str(out),
                        timeout=180)  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    assert "Ray actor(s) on a cluster of 2 node(s)" in result.stdout + result.stderr
    document = json.loads(out.read_text())
    assert document["status"] == "succeeded"
    generator = document["generator"]
    workers, nodes = generator["workers"], generator["nodes"]
    assert len(workers) == 2, "--ray without --workers: one actor per free CPU"
    assert len(nodes) == 2
    assert {n["node"] for n in nodes} == {w["node"] for w in workers}
    offered = sum(p["offered"] for p in document["phases"])
    assert sum(n["planned"] for n in nodes) == sum(n["finished"] for n in nodes) == offered > 20
    assert all(n["failed"] == 0 and n["lost"] == 0 for n in nodes)
    assert all(p["outcomes"]["not_sent"] == 0 for p in document["phases"])


def test_run_with_a_ray_address_where_nothing_answers_fails_before_any_load(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = cliffwatch("run", str(write(tmp_path, QUICK)), "--ray", address, timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"nothing answers at the Ray address {address}" in result.stderr


@pytest.mark.parametrize("address", ["", "head:port"])
def test_a_malformed_ray_address_is_an_input_error(tmp_path: Path, address: str) -> None:
    """Exit 2 (the user's input), before Ray is imported or any load: only a well-formed address where nothing
    answers is the environment's (exit 3)."""
    result = cliffwatch("run", str(write(tmp_path, QUICK)), "--ray", address, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    reason = "is not auto, HOST:PORT or ray://HOST:PORT" if not address else "the port must be a number"
    assert f"--ray: {address!r}" in result.stderr, result.stderr
    assert reason in result.stderr
