"""A running run's lease, kept by its worker: renewed on time, retried through a database outage, and given
up *before* it expires when it cannot be renewed.

The lease is the only liveness another instance can see. An instance that cannot renew it may still be
sending load, so the reaper of another instance must not presume it dead while it might be. The worker
therefore fences itself: when renewals have failed until the lease is about to run out (``fence_margin_s``
before its expiry, by this process's monotonic clock), it stops the run — nothing more is sent, in-flight
requests are cut, faults are removed — and keeps what it has in memory for when the database is back.
The reaper waits for the lease's expiry plus a grace period (``Settings.lease_grace_s``) before it
interrupts the run and removes its faults, so by then this run's load has provably stopped.

Expiry is counted from the moment *before* a renewal was asked for: the database committed it later, so the
lease it holds ends no earlier than that count says, whatever the round trip took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.domain.ports import RunStore
from cliffwatch.services.ports import Interruptible

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class LeaseTiming:
    """How a lease of ``lease_s`` is kept: renewed every third of it; after a failed renewal retried from
    ``retry_first_s`` doubling to ``retry_max_s``; the run fenced ``fence_margin_s`` before expiry."""

    lease_s: float
    retry_first_s: float = 0.1

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / 3

    @property
    def retry_max_s(self) -> float:
        # Often enough that a database back before the fence is due is noticed before it.
        return min(2.0, self.lease_s / 10)

    @property
    def fence_margin_s(self) -> float:
        # Long enough to stop the generator (a synchronous call) with room for a late timer; short enough
        # that a brief outage near the end of a renewal period does not fence a healthy run.
        return min(1.0, self.lease_s / 6)


class LeaseKeeper:
    """Keeps one run's lease until cancelled. ``fenced`` says why the run was stopped when the lease could
    not be kept; ``lost`` is True when the store said another decided the run's fate (the lease had expired
    and the run was reaped, or it ended)."""

    def __init__(
        self,
        *,
        runs: RunStore,
        run_id: str,
        owner: str,
        timing: LeaseTiming,
        now: Callable[[], datetime],
        held_since: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``held_since``: the monotonic time taken just before the claim that granted the lease."""
        self.runs = runs
        self.run_id = run_id
        self.owner = owner
        self.timing = timing
        self.now = now
        self.monotonic = monotonic
        self.expires_at = held_since + timing.lease_s
        self.fenced: str | None = None
        self.lost = False
        self._failing_since: float | None = None
        self._last_error = ""

    @property
    def fence_at(self) -> float:
        return self.expires_at - self.timing.fence_margin_s

    async def keep(self, run: Interruptible) -> None:
        """Renews the lease until cancelled; interrupts ``run`` when the lease is lost or about to lapse."""
        delay = self.timing.renew_every_s
        retry = self.timing.retry_first_s
        renewal: asyncio.Task[bool] | None = None
        try:
            while True:
                if renewal is None:
                    await asyncio.sleep(max(0.0, min(delay, self.fence_at - self.monotonic())))
                    if self.monotonic() >= self.fence_at:
                        self._fence(run)
                        return
                    asked = self.monotonic()
                    renewal = asyncio.create_task(self._renew(), name=f"renew-{self.run_id}")
                # Waited for apart from the call: a database call that hangs (a SQLite busy wait, whose clean-up
                # on cancellation waits too) must not hold the fence back.
                await asyncio.wait({renewal}, timeout=max(0.0, self.fence_at - self.monotonic()))
                if not renewal.done():
                    self._failed(asked, "no answer from the database")
                    self._fence(run)
                    return
                try:
                    held = renewal.result()
                except StoreUnavailable as exc:
                    self._failed(asked, str(exc))
                    delay, retry = retry, min(retry * 2, self.timing.retry_max_s)
                    continue
                except Exception as exc:  # a bug of ours cannot confirm the lease either: treated as unavailable
                    log.exception("renewing a lease failed unexpectedly", run_id=self.run_id)
                    self._failed(asked, f"{type(exc).__name__}: {exc}")
                    delay, retry = retry, min(retry * 2, self.timing.retry_max_s)
                    continue
                finally:
                    if renewal.done():
                        renewal = None
                if not held:
                    self.lost = True
                    log.warning("lost the lease of a running run: stopping it", run_id=self.run_id)
                    run.interrupt()
                    return
                if self._failing_since is not None:
                    log.info("lease renewed again", run_id=self.run_id, after_s=round(asked - self._failing_since, 2))
                self.expires_at = asked + self.timing.lease_s
                self._failing_since = None
                delay, retry = self.timing.renew_every_s, self.timing.retry_first_s
        finally:
            if renewal is not None and not renewal.done():
                renewal.cancel()
                await asyncio.gather(renewal, return_exceptions=True)

    async def _renew(self) -> bool:
        until = self.now() + timedelta(seconds=self.timing.lease_s)
        return await self.runs.renew_lease(self.run_id, owner=self.owner, lease_until=until)

    def _failed(self, asked: float, error: str) -> None:
        if self._failing_since is None:
            self._failing_since = asked
            log.warning("could not renew a run's lease: retrying until it would expire", run_id=self.run_id,
                        error=error, expires_in_s=round(self.expires_at - asked, 2))  # fmt: skip
        self._last_error = error

    def _fence(self, run: Interruptible) -> None:
        failing_for = 0.0 if self._failing_since is None else self.monotonic() - self._failing_since
        self.fenced = (
            f"fenced: the lease could not be renewed for {failing_for:.1f}s ({self._last_error or 'no answer'}), "
            f"so the run stopped its load {self.timing.fence_margin_s:g}s before the lease would expire"
        )
        log.error("fencing a run: its lease is about to expire unrenewed", run_id=self.run_id, reason=self.fenced)
        run.interrupt()
