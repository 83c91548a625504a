"""Result documents on disk: the JSON a run writes with ``--json``."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from cliffwatch.domain.result import RunResult


def write_result(result: RunResult, path: Path) -> None:
    """Writes the result atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result.to_dict(), indent=2, allow_nan=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
