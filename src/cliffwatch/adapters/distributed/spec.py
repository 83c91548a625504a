"""Everything a generator worker process needs to send its share, sent to it as its first message.

The worker builds its own HTTP client from it: the scenario as sent (secrets already read, so the worker reads
no secret store and needs no settings), its share of the client's limits, the places the run admitted with the
addresses they were pinned to (the worker resolves nothing the run did not check), and the prompts as the
coordinator's preflight settled them (a calibration or the server's own token counts are measured once, by
the coordinator, and every worker sends the same prompts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.security.allowlist import Allowlist
from cliffwatch.domain.security.redaction import DEFAULT_RULES, RedactionRules
from cliffwatch.domain.traffic.rate_limit import RateLimit

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
BEAT_INTERVAL_S = 0.5  # the coordinator says it is alive this often
BEAT_TIMEOUT_S = 3.0  # a worker that hears nothing for this long fences itself: it stops sending and exits


@dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    index: int
    count: int
    scenario: Scenario  # as sent, its client cut to this worker's share (``domain.traffic.shards.client_share``)
    base_url: str  # where the load goes (the target, or the proxy in front of it)
    allowlist: Allowlist
    pins: tuple[tuple[str, int, tuple[str, ...]], ...]  # (host, port, addresses) the run admitted
    cap: RateLimit | None  # this worker's share of the run's attempt cap
    # The prompts as the run's preparation and preflight settled them (``HttpExecutor`` keyword arguments): a
    # tokenizer's travel with its measured filler and overhead, never its files or chat template, so a worker
    # reads no file and renders nothing, and its prompts are the coordinator's to the token.
    executor: dict[str, Any] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # values the worker's log lines must mask
    redaction: RedactionRules = DEFAULT_RULES
    log_level: str = "warning"
    beat_timeout_s: float = BEAT_TIMEOUT_S
    # The run's own scheduling priority (its nice value): a worker started at a lower one (Ray starts its workers
    # at nice 15) takes the run's back when the system lets it (``worker_process.settle_niceness``).
    niceness: int = 0


def this_boot() -> str | None:
    """This machine's boot id: two processes under the same one read the same monotonic clock. None where the
    system does not say (not Linux): the clock is then measured, as another machine's would be."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None
