"""Result documents on disk: the JSON a run or a sweep writes with ``--json``."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cliffwatch.domain.results.result import RunResult


def write_result(result: RunResult, path: Path) -> None:
    """Writes the result atomically (a reader never sees half a file)."""
    write_document(result.to_dict(), path)


def write_document(document: Mapping[str, Any], path: Path) -> None:
    """Writes a JSON document (a run's or a sweep's result) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=2, allow_nan=False)
    # Not tempfile.mkstemp: its files are private (0600), and the result should get what any new file gets.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
