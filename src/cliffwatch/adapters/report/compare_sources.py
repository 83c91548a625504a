"""What ``cliffwatch compare`` compares, read from disk: a run's or a sweep's result file, or one experiment of a
game day's combined file (``SUITE.json#EXPERIMENT``, the experiment by its name).

A source that is no file is left to the caller (a run id in the store); a file that is not a result cliffwatch
reads, or a suite without the experiment named, raises ``ReportInvalid`` with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cliffwatch.adapters.documents.json_loader import load_json
from cliffwatch.adapters.documents.limits import RESULT_LIMITS, DocumentInvalid
from cliffwatch.adapters.report.render import ReportInvalid, check_report_document
from cliffwatch.domain.compare.comparison import Side


def file_side(source: str) -> Side | None:
    """The side ``source`` names on disk, or None when it names no file (so it may be a stored run's id)."""
    path_text, _, experiment = source.partition("#")
    path = Path(path_text)
    if not path.is_file():
        return None
    try:
        with path.open("rb") as handle:
            raw = handle.read(RESULT_LIMITS.max_bytes + 1)  # a byte over is enough to refuse
        document = load_json(raw, RESULT_LIMITS)
    except (OSError, DocumentInvalid) as exc:
        raise ReportInvalid(f"cannot read it ({exc})", source=path_text) from exc
    if isinstance(document, Mapping) and document.get("kind") == "gameday":
        document = _experiment(document, experiment, path_text)
    elif experiment:
        raise ReportInvalid(f"#{experiment} names an experiment, but this is not a game day's file", source=path_text)
    try:
        check_report_document(document)
    except ReportInvalid as exc:
        raise ReportInvalid(exc.reason, source=source, kind=exc.kind) from None
    return Side(label=source, document=dict(document))


def looks_like_a_path(source: str) -> bool:
    """Whether ``source`` was meant as a file (so a missing one is not looked up as a run id)."""
    path = source.partition("#")[0]
    return "/" in path or "\\" in path or path.lower().endswith(".json") or Path(path).exists()


def _experiment(suite: Mapping[str, Any], name: str, source: str) -> Mapping[str, Any]:
    experiments = [e for e in suite.get("experiments") or [] if isinstance(e, Mapping)]
    names = ", ".join(str(e.get("name")) for e in experiments) or "none"
    if not name:
        raise ReportInvalid(f"a game day's file holds several runs: name one as {source}#EXPERIMENT ({names})",
                            source=source)  # fmt: skip
    found = next((e for e in experiments if e.get("name") == name), None)
    if found is None:
        raise ReportInvalid(f"no experiment {name!r} in this game day ({names})", source=source)
    if not isinstance(found.get("result"), Mapping):
        raise ReportInvalid(f"experiment {name!r} did not run ({found.get('state')}: {found.get('error')})",
                            source=source)  # fmt: skip
    result: Mapping[str, Any] = found["result"]
    return result
