"""GitHub Actions: whether this process runs in a workflow (``GITHUB_ACTIONS=true``), its job summary file
(``GITHUB_STEP_SUMMARY``), and the workflow commands that annotate the job (``::error`` and ``::warning``).

The environment is handed in by the caller (``config.process_environment``): this module reads none itself.
Escaping follows GitHub's runner (``toolkit/packages/core/src/command.ts``): in a message ``%``, ``\\r`` and
``\\n``; in a property also ``:`` and ``,``, which would otherwise end it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cliffwatch.domain.ci.checks import Annotation


@dataclass(frozen=True, kw_only=True)
class GithubActions:
    """The workflow this process runs in: the job summary file it may append to (None when the runner names
    none)."""

    step_summary: Path | None

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> GithubActions | None:
        """The workflow of ``environ``, or None when it is not GitHub Actions (``GITHUB_ACTIONS`` is not ``true``)."""
        if environ.get("GITHUB_ACTIONS") != "true":
            return None
        summary = environ.get("GITHUB_STEP_SUMMARY")
        return cls(step_summary=Path(summary) if summary else None)

    def append_summary(self, markdown: str) -> bool:
        """Appends ``markdown`` to the job summary (the runner shows every step's, in order); False when there is
        no summary file to write."""
        if self.step_summary is None:
            return False
        with self.step_summary.open("a", encoding="utf-8") as handle:
            handle.write(markdown if markdown.endswith("\n") else markdown + "\n")
        return True


def escape_data(text: str) -> str:
    """A workflow command's message, escaped so that a line break or ``%`` in it cannot end or forge a command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``title=...``), escaped as a message and also for ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation_line(annotation: Annotation) -> str:
    """``::error title=...::message`` (or ``::warning``): one line the runner turns into an annotation."""
    return f"::{annotation.level} title={escape_property(annotation.title)}::{escape_data(annotation.message)}"


def annotation_lines(annotations: Iterable[Annotation]) -> list[str]:
    return [annotation_line(a) for a in annotations]
