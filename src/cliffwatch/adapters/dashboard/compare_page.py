"""The compare page: pick two finished runs (or two sweeps) and read, figure by figure, whether B regressed,
improved or shows no detectable difference against A; the same judgement as ``GET /api/v1/compare`` and
``cliffwatch compare``, shown as the comparison report's markup.

Runs of another workload are refused with every reason, and a box to compare them anyway."""

from __future__ import annotations

import re

from aiohttp import web
from markupsafe import Markup

from cliffwatch.adapters.api.compare import compared
from cliffwatch.adapters.dashboard.context import ui_services
from cliffwatch.adapters.dashboard.render import render
from cliffwatch.adapters.report.compare_report import comparison_body
from cliffwatch.domain.errors import CompareRefused, RunNotFound
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import RunQuery

CHOICES = 50  # the newest finished runs offered in the pickers
_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


async def compare_page(request: web.Request) -> web.Response:
    api = ui_services(request).api
    a, b = (_id(request.query.get(key)) for key in ("a", "b"))
    allow_unlike = request.query.get("allow_unlike") == "true"
    page = await api.runs.page(RunQuery(status=RunStatus.SUCCEEDED, limit=CHOICES))
    choices = [{"id": r.id, "label": f"{r.id} · {r.scenario_name} · {r.kind.value} · {r.target_url}"}
               for r in page.runs]  # fmt: skip
    if a is None or b is None:
        return render("compare.html", choices=choices, a=a or "", b=b or "", allow_unlike=allow_unlike, body=None,
                      refused=[])  # fmt: skip
    body, status, refused = None, 200, []
    try:
        comparison = await compared(api, a, b, allow_unlike=allow_unlike)
        body = Markup(comparison_body(comparison.to_dict()))
    except CompareRefused as exc:
        status, refused = 422, list(exc.reasons)
    except RunNotFound as exc:
        status, refused = 404, [f"no run {exc.run_id}"]
    return render("compare.html", status=status, choices=choices, a=a, b=b, allow_unlike=allow_unlike, body=body,
                  refused=refused)  # fmt: skip


def _id(value: str | None) -> str | None:
    return value if value is not None and _ID.fullmatch(value) else None
