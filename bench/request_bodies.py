"""What building a request body costs at the hard limit of 1,000,000 prompt words (about 6 MB): the figure of
docs/security.md ("Caps count what is really sent", control 3). Runs in a few seconds:
``PYTHONPATH=src python bench/request_bodies.py``.

Three ways, median of 30 bodies each, in milliseconds: encoding the whole document per request (what every
attempt did before bodies were prepared ahead; it also built the prompt word by word, left out here, so this
understates the old cost), joining the prepared pieces while each body is freed before the
next (its memory reused), and joining them while all 30 stay alive, as in-flight requests' bodies do (every
body in fresh memory: the figure a run sees).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

from cliffwatch.adapters.loadgen.bodies import RequestBodies
from cliffwatch.adapters.loadgen.prompts import prompt_bytes
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.scenario.target_spec import MAX_PROMPT_TOKENS
from cliffwatch.domain.traffic.plan import PlannedRequest

BODIES = 30


def request(index: int) -> PlannedRequest:
    return PlannedRequest(id=index * 7919, phase=0, scheduled_ns=0, prompt_tokens=MAX_PROMPT_TOKENS, max_tokens=8)


def median_ms(make: Callable[[int], bytes | None], *, hold: bool) -> float:
    held, took = [], []
    for index in range(BODIES):
        started = time.perf_counter()
        body = make(index)
        took.append(time.perf_counter() - started)
        if hold:
            held.append(body)
        del body
    return statistics.median(took) * 1000


def main() -> None:
    scenario = parse_scenario({
        "name": "bodies",
        "target": {"url": "http://127.0.0.1:9", "api": "openai-chat",
                   "request": {"model": "m", "prompt_tokens": MAX_PROMPT_TOKENS, "max_tokens": 8}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
    })  # fmt: skip
    bodies = RequestBodies(scenario)

    def encoded(index: int) -> bytes:
        prompt = prompt_bytes(request(index).id, MAX_PROMPT_TOKENS).decode()
        document = {"model": "m", "max_tokens": 8, "stream": False, "messages": [{"role": "user", "content": prompt}]}
        return json.dumps(document).encode()

    def joined(index: int) -> bytes | None:
        return bodies.render(request(index))

    print(f"a body of {MAX_PROMPT_TOKENS:,} prompt words, median of {BODIES} (ms)")
    print(f"  encoded per request, bodies held:  {median_ms(encoded, hold=True):8.2f}")
    print(f"  prepared ahead, memory reused:     {median_ms(joined, hold=False):8.2f}")
    print(f"  prepared ahead, bodies held:       {median_ms(joined, hold=True):8.2f}")


if __name__ == "__main__":
    main()
