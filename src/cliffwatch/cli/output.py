"""Where the commands print: standard output, wide enough off a terminal (CI logs, pipes) that tables are not
squeezed into 80 columns."""

from __future__ import annotations

from rich.console import Console


def stdout(*, width: int = 150) -> Console:
    """The console of standard output; off a terminal, ``width`` columns wide."""
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=width)
