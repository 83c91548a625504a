"""How long the target took to be idle again after a sweep step, and how that was known.

A step ends when its client has nothing in flight, but a server keeps working on requests whose clients gave
up (a deferred llama.cpp task, vLLM's waiting queue), and the next step would inherit that backlog. So after
each step the sweep waits for the target itself:

- ``server metrics`` (with ``target.metrics``): until the server's own waiting and running requests read 0;
- ``probe`` (without): until one small request is answered within twice the first-token time it had on the
  idle target before the first step (and at least ``PROBE_FLOOR_MS`` more, so a 1-ms baseline's jitter is not
  taken for a backlog), or no clearly faster than the probe before it (by ``STEADY_SHARE`` and
  ``PROBE_FLOOR_MS``): a backlog shows as probes getting faster while it drains, so a probe that is not is one
  with none left ahead of it, even on a target that has become slower than it was idle (a drifting one, which
  would otherwise never count as drained) or whose times jitter on a busy machine;
- ``client``: only the client's in-flight requests are waited for (neither of the above could be used, the
  ``detail`` says why);

each bounded by the sweep's ``drain_timeout_s``: a step whose target did not drain in time says so, and the
next step starts anyway (its own figures then carry the backlog, which the report shows beside them).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

PROBE_FLOOR_MS = 5.0


class DrainSignal(StrEnum):
    SERVER_METRICS = "server metrics"
    PROBE = "probe"
    CLIENT = "client"


STEADY_SHARE = 0.25


def probe_steady(previous_ms: float, probe_ms: float) -> bool:
    """Whether a probe was no clearly faster than the one before it: no backlog was draining ahead of it."""
    return probe_ms >= previous_ms - max(STEADY_SHARE * previous_ms, PROBE_FLOOR_MS)


def probe_bound_ms(idle_first_token_ms: float) -> float:
    """The first-token time a probe must beat for the target to count as drained."""
    return max(2.0 * idle_first_token_ms, idle_first_token_ms + PROBE_FLOOR_MS)


@dataclass(frozen=True, kw_only=True)
class StepDrain:
    """After one step: how the target's idleness was judged, how long it took, and whether it came in time."""

    by: DrainSignal
    seconds: float
    drained: bool
    detail: str | None = None  # the last reading (a backlog of N, a probe's time against the bound), or why not

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by.value, "seconds": round(self.seconds, 3), "drained": self.drained, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: Any) -> StepDrain | None:
        if not isinstance(data, dict):
            return None
        return cls(by=DrainSignal(data["by"]), seconds=float(data["seconds"]), drained=bool(data["drained"]),
                   detail=data.get("detail"))  # fmt: skip
