"""Reports on disk: reading a result document for a report, and writing the page atomically."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cliffwatch.adapters.documents import RESULT_LIMITS, DocumentInvalid, load_json
from cliffwatch.adapters.report.render import ReportInvalid, check_report_document, render_report


def read_result_file(path: Path) -> dict[str, Any]:
    """The run or sweep result document in ``path`` (what ``cliffwatch run --json`` or ``cliffwatch sweep
    --json`` wrote; a sweep's has ``"kind": "sweep"``).

    Raises ``FileNotFoundError`` when there is no such file and ``ReportInvalid`` when it cannot be read or
    is neither a run nor a sweep result.
    """
    try:
        with path.open("rb") as handle:
            raw = handle.read(RESULT_LIMITS.max_bytes + 1)  # a byte over is enough to refuse
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ReportInvalid(f"cannot read it ({exc})", source=str(path)) from exc
    try:
        document = load_json(raw, RESULT_LIMITS)
    except DocumentInvalid as exc:
        raise ReportInvalid(f"not a JSON document cliffwatch reads ({exc})", source=str(path)) from exc
    try:
        check_report_document(document)
    except ReportInvalid as exc:
        raise ReportInvalid(exc.reason, source=str(path), kind=exc.kind) from None
    return dict(document)


def write_text_atomically(text: str, path: Path) -> None:
    """Writes ``text`` so that a reader (a browser reloading it) never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    # Not tempfile.mkstemp: its files are private (0600), and a report is meant to be shared like any file.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_run_report(
    document: Mapping[str, Any], path: Path, *, timeseries: Sequence[Mapping[str, Any]] | None = None
) -> Path:
    """Renders the report of the run (or sweep, by the document's kind) into ``path`` and returns the path."""
    write_text_atomically(render_report(document, timeseries), path)
    return path
