"""Result documents on disk: the JSON a run writes with ``--json``."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from cliffwatch.domain.result import RunResult


def write_result(result: RunResult, path: Path) -> None:
    """Writes the result atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result.to_dict(), indent=2, allow_nan=False)
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
