"""A run's result read back from its document, enough to judge a hypothesis on it (``hypothesis.JudgedRun``).

The service stores a run's result as the document ``RunResult.to_dict()`` makes, not as the object; a game day
run through the service judges each experiment on that document. Only what a hypothesis reads is taken out of
it (status, abort reason, whether it passed, the score and its sentence, the verdicts raised); the document
itself is kept whole, so the combined result holds each experiment's result exactly as the run stored it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cliffwatch.domain.results.result import RunStatus


@dataclass(frozen=True, kw_only=True)
class StoredScore:
    value: float | None
    summary: str


@dataclass(frozen=True, kw_only=True)
class StoredVerdict:
    name: str
    summary: str


@dataclass(frozen=True, kw_only=True)
class StoredResult:
    status: RunStatus
    abort_reason: str | None
    passed: bool
    score: StoredScore
    raised: tuple[StoredVerdict, ...]
    document: Mapping[str, Any]

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> StoredResult:
        """The result a stored run document describes; raises ``ValueError`` when it is not a run's result."""
        try:
            status = RunStatus(document["status"])
            score = document.get("score") or {}
            value = score.get("value")
            verdicts = tuple(StoredVerdict(name=str(v["name"]), summary=str(v.get("summary", "")))
                             for v in document.get("verdicts") or ())  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a run's result document: {exc}") from exc
        reason = document.get("abort_reason")
        return cls(status=status, abort_reason=reason if isinstance(reason, str) else None,
                   passed=document.get("passed") is True,
                   score=StoredScore(value=float(value) if isinstance(value, int | float) else None,
                                     summary=str(score.get("summary", ""))),
                   raised=verdicts, document=document)  # fmt: skip

    def verdicts(self) -> tuple[StoredVerdict, ...]:
        return self.raised

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)
