"""Files a scenario names (a tokenizer, a trace), read only below ``CLIFFWATCH_DATA_DIRS``.

A scenario is written by whoever may submit one; without this limit its paths could reach any file the
process can read (the state directory, the database, keys). Symlinks are resolved before the check, and a
refusal never quotes the file's content.
"""

from __future__ import annotations

import os
from pathlib import Path


class DataFileRefused(Exception):
    """The file cannot be read for this scenario; ``reason`` says why, naming the path given."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def allowed_path(path: str, *, data_dirs: tuple[Path, ...] | None) -> str:
    """``path`` resolved, when it exists below one of ``data_dirs`` (None: the working directory)."""
    resolved = os.path.realpath(path)
    allowed = [os.path.realpath(d) for d in (data_dirs if data_dirs is not None else (Path.cwd(),))]
    if not any(resolved == d or resolved.startswith(d.rstrip("/") + "/") for d in allowed):
        raise DataFileRefused(
            f"{path} is outside the directories data files may be read from (CLIFFWATCH_DATA_DIRS: "
            f"{', '.join(allowed) or 'none'})"
        )
    if not os.path.exists(resolved):
        raise DataFileRefused(f"{path} does not exist")
    return resolved


def readable_data_file(path: str, *, data_dirs: tuple[Path, ...] | None, limit: int) -> bytes:
    """The content of the regular file at ``path`` (at most ``limit`` bytes), checked as above."""
    resolved = allowed_path(path, data_dirs=data_dirs)
    if not os.path.isfile(resolved):
        raise DataFileRefused(f"{path} is not a regular file")
    try:
        with open(resolved, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise DataFileRefused(f"{path} cannot be read: {exc.strerror}") from exc
    if len(data) > limit:
        raise DataFileRefused(f"{path} is over the limit of {limit:,} bytes")
    return data
