"""``GET /api/v1/compare?a=RUN&b=RUN``: two stored runs (or two sweeps, or two experiments of a game day, which are
runs) compared figure by figure, as ``cliffwatch compare`` does (``domain.compare``).

The bootstrap is seeded from the two ids, so the same question gets the same answer every time it is asked.
Unlike runs are refused (422 ``compare-refused``, every reason listed) unless ``allow_unlike=true``; a run
without a result yet is refused the same way.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from cliffwatch.adapters.api.context import ApiServices, services
from cliffwatch.adapters.api.requests import Query
from cliffwatch.adapters.documents import off_loop
from cliffwatch.domain.compare.comparison import Comparison, Side, compare
from cliffwatch.domain.errors import CompareRefused, Problem

_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_FLAG = re.compile(r"true|false")


async def compare_runs(request: web.Request) -> web.Response:
    query = Query(request.query)
    a, b = query.string("a", pattern=_ID), query.string("b", pattern=_ID)
    allow_unlike = query.string("allow_unlike", pattern=_FLAG) == "true"
    query.problems += [Problem(path=key, message="is required") for key in ("a", "b") if key not in request.query]
    query.close()
    if a is None or b is None:  # close() raised for either: never, but typed so
        raise CompareRefused(["name both runs: a=RUN&b=RUN"])
    comparison = await compared(services(request), a, b, allow_unlike=allow_unlike)
    return web.json_response(comparison.to_dict())


async def compared(api: ApiServices, a: str, b: str, *, allow_unlike: bool) -> Comparison:
    """Stored runs ``a`` and ``b`` compared (the dashboard's compare view shows the same); RunNotFound for an
    unknown id (404), CompareRefused for one without a result or unlike ones (422)."""
    sides = [Side(label=run_id, document=await _result(api, run_id)) for run_id in (a, b)]
    # Off the loop: a bootstrap takes about 15 ms a percentile, and runs of many phases and classes have dozens.
    return await off_loop(lambda: compare(sides[0], sides[1], rng=random.Random(f"{a}/{b}"), allow_unlike=allow_unlike))


async def _result(api: ApiServices, run_id: str) -> Mapping[str, Any]:
    run = await api.runs.get(run_id)  # RunNotFound: 404
    if run.result is None:
        raise CompareRefused([f"{run_id} has no result yet (it is {run.status.value})"])
    return run.result
