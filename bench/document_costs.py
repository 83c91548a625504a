"""What hostile documents cost, and what the limits hold it to: the figures of docs/security.md ("Hostile
documents"). Runs in a few seconds: ``PYTHONPATH=src python bench/document_costs.py``.

Each figure is the best of three, in milliseconds: PyYAML's safe loader and ours on the same documents (an
alias bomb, the largest YAML and JSON the limits allow, a flood of values they refuse), validation, the
content hash and the dashboard's YAML view of the largest valid document, and the longest event-loop block
while the largest document is parsed in the loop or in the documents thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import yaml

from cliffwatch.adapters.documents import (
    SCENARIO_LIMITS,
    DocumentInvalid,
    dump_yaml,
    load_json,
    load_yaml,
    offload,
    yaml_loader,
)
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.scenario import content_hash, parse_scenario


def bomb(levels: int) -> str:
    """A scenario whose request body is an alias bomb: 9**levels strings once expanded, in ~70 bytes a level."""
    body = ", ".join(["x0: &x0 [l, l, l, l, l, l, l, l, l]"]
                     + [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, levels)])  # fmt: skip
    return (
        "name: bomb\nslo: {e2e_ms: 1000, timeout_ms: 2000}\n"
        f"target: {{url: 'http://127.0.0.1:9', api: http, request: {{body: {{{body}}}}}}}\n"
        "phases: [{name: a, role: baseline, duration_s: 1, arrival: {process: constant, rate: 1}}]\n"
    )


def worst_document() -> dict[str, Any]:
    deep: Any = "end"
    for _ in range(SCENARIO_LIMITS.max_depth - 4):
        deep = [deep]
    return {
        "name": "worst", "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "target": {"url": "http://127.0.0.1:9", "api": "http",
                   "request": {"body": {"deep": deep, "texts": ["é" * 45] * (SCENARIO_LIMITS.max_nodes - 200)}}},
        "phases": [{"name": "a", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
    }  # fmt: skip


def best_ms(work: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        with contextlib.suppress(DocumentInvalid, ScenarioInvalid, yaml.YAMLError):
            work()
        best = min(best, time.perf_counter() - started)
    return best * 1000


async def loop_block_ms(parse: Callable[[], Any]) -> float:
    """The longest a 2 ms probe woke late while ``parse`` ran (awaited, or called in the loop)."""
    longest = 0.0
    done = asyncio.Event()

    async def probe() -> None:
        nonlocal longest
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.002)
            longest = max(longest, time.perf_counter() - before - 0.002)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0)
    result = parse()
    if asyncio.iscoroutine(result):
        await result
    done.set()
    await task
    return longest * 1000


def main() -> None:
    document = worst_document()
    worst_json = json.dumps(document, ensure_ascii=False)
    worst_yaml = yaml.safe_dump(document, allow_unicode=True, width=10_000)
    flood = "[" + ",".join(["0"] * 450_000) + "]"
    rows = [
        ("alias bomb, 7 levels (4.8 M values), validated: PyYAML safe_load",
         lambda: parse_scenario(yaml.safe_load(bomb(7)))),
        ("alias bomb, 7 levels: load_yaml (refused)", lambda: load_yaml(bomb(7), SCENARIO_LIMITS)),
        (f"flood of 450,000 values ({len(flood) // 1000} KB YAML): PyYAML with libyaml (CSafeLoader)",
         lambda: yaml.load(flood, Loader=yaml.CSafeLoader)),
        ("flood of 450,000 values: load_yaml (refused at 10,000)", lambda: load_yaml(flood, SCENARIO_LIMITS)),
        ("flood of 450,000 values: load_json (refused before parsing)", lambda: load_json(flood, SCENARIO_LIMITS)),
        (f"largest valid YAML ({len(worst_yaml.encode()) // 1000} KB, 10,000 values): load_yaml, libyaml",
         lambda: load_yaml(worst_yaml, SCENARIO_LIMITS)),
        ("largest valid YAML: load_yaml, PyYAML's own parser", lambda: _pure(worst_yaml)),
        (f"largest valid JSON ({len(worst_json.encode()) // 1000} KB): load_json",
         lambda: load_json(worst_json, SCENARIO_LIMITS)),
        ("largest valid document: validation (parse_scenario)", lambda: parse_scenario(document)),
        ("largest valid document: content hash", lambda: content_hash(document)),
        ("largest valid document: the dashboard's YAML view (dump_yaml)", lambda: dump_yaml(document)),
    ]  # fmt: skip
    for label, work in rows:
        print(f"{best_ms(work):9.1f} ms  {label}")
    inline = asyncio.run(loop_block_ms(lambda: load_yaml(worst_yaml, SCENARIO_LIMITS)))
    threaded = asyncio.run(loop_block_ms(lambda: offload.load_off_loop(load_yaml, worst_yaml, SCENARIO_LIMITS)))
    print(f"{inline:9.1f} ms  longest loop block, largest valid YAML parsed in the event loop")
    print(f"{threaded:9.1f} ms  longest loop block, the same parsed in the documents thread (load_off_loop)")


def _pure(text: str) -> Any:
    saved = yaml_loader._Loader
    yaml_loader._Loader = yaml_loader._PureLoader
    try:
        return load_yaml(text, SCENARIO_LIMITS)
    finally:
        yaml_loader._Loader = saved


if __name__ == "__main__":
    main()
