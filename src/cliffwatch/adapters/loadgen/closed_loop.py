"""The closed-loop generator: N clients, each sending its next request as soon as its previous one ended.

Used by concurrency sweeps, where a step is a number of clients rather than an arrival rate: what an
interactive benchmark (a fixed pool of users) does. Requests, retries and records are the open-loop
generator's own (same executor, same retry decisions, same records); only the schedule differs: a
request is scheduled when its client is free, so queueing ahead of the target cannot happen here, and
latency under load shows up as fewer requests sent rather than as late ones.

Clients answered instantly (a target refusing everything) would send as fast as the loop turns, so the
attempt cap paces them: a client takes a token before each new request and, when there is none, waits
for one (the wait is counted: the step is capped). Such a request does not exist until it is sent, so
nothing is recorded not_sent; a retry the cap refuses is not sent, as in the open loop.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import random
from collections.abc import Iterable

from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.request_attempts import AttemptExecutor
from cliffwatch.domain.outcomes import NS_PER_S
from cliffwatch.domain.ports import Clock, GeneratorListener
from cliffwatch.domain.scenario.arrivals import Mix
from cliffwatch.domain.scenario.conversations import PrefixChooser
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.generator_health import GeneratorLimits
from cliffwatch.domain.traffic.plan import PlannedRequest, later_turns_of, phase_windows
from cliffwatch.domain.traffic.rate_limit import TokenBucket

CAP_POLL_S = 0.1  # a client waiting for the cap looks at the stop and the clock at least this often


class ClosedLoopGenerator(OpenLoopGenerator):
    """Implements the ``LoadGenerator`` port with ``clients`` closed-loop clients for the scenario's
    duration; the plan passed to ``run`` is ignored (its phases' windows are the scenario's)."""

    def __init__(
        self,
        scenario: Scenario,
        executor: AttemptExecutor,
        clock: Clock,
        *,
        clients: int,
        limits: GeneratorLimits | None = None,
        cap: TokenBucket | None = None,
    ) -> None:
        if clients < 1:
            raise ValueError(f"a closed loop needs at least one client, got {clients}")
        super().__init__(scenario, executor, clock, limits, cap=cap)
        self.clients = clients
        self._next_id = 0
        # One client at a time waits on an empty bucket, the others queued behind it in turn: a token wakes
        # one client, where a thousand sleeping for the same refill would all wake and all but one sleep again.
        self._cap_queue = asyncio.Lock()

    async def _dispatch(self, plan: Iterable[PlannedRequest], start_ns: int, listener: GeneratorListener) -> None:
        delay_s = (start_ns - self.clock.now_ns()) / NS_PER_S
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        loops = [asyncio.create_task(self._client(index, start_ns, listener)) for index in range(self.clients)]
        try:
            await asyncio.gather(*loops)
        finally:
            for loop in loops:
                loop.cancel()

    async def _client(self, index: int, start_ns: int, listener: GeneratorListener) -> None:
        windows = phase_windows(self.scenario)
        starts = [w.start_ns for w in windows]
        end_ns = windows[-1].end_ns
        klass = self._client_classes()[index]
        template = self.scenario.request_for(klass)
        shapes = random.Random(f"{self.scenario.seed}:closed-loop:{index}")
        prefixes = PrefixChooser(self.scenario.prefix_for(klass), random.Random(f"{self.scenario.seed}:prefix:{index}"))
        sessions = self.scenario.sessions_for(klass) is not None
        while self._stop_reason is None:
            at_ns = self.clock.now_ns() - start_ns
            if at_ns >= end_ns:
                return
            if not await self._cap_token(start_ns + end_ns):
                continue  # stopped, or the step ended while waiting: the loop's own checks end it
            at_ns = self.clock.now_ns() - start_ns
            request_id, prefix = self._next_id, prefixes.next()
            # With sessions a client is one user after another: each of its requests starts a conversation,
            # and the next starts when that conversation has ended.
            turns = 1 + len(later_turns_of(self.scenario, klass, request_id, prefix)) if sessions else 0
            request = PlannedRequest(
                id=request_id,
                phase=max(0, bisect.bisect_right(starts, at_ns) - 1),
                scheduled_ns=at_ns,
                prompt_tokens=template.prompt_tokens.sample(shapes) if template.prompt_tokens else 0,
                max_tokens=template.max_tokens.sample(shapes) if template.max_tokens else 0,
                klass=klass,
                prefix=prefix,
                conversation=request_id if sessions else -1,
                turn=1 if sessions else 0,
                turns=turns,
            )
            self._next_id += 1
            self._dispatched += 1
            listener.dispatched(request, at_ns)
            self._unstarted.add(request.id)
            send = self._run_conversation if sessions else self._run_request
            task = asyncio.create_task(send(request, start_ns, listener, prepaid=True))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._task_done, request, listener))
            await asyncio.wait([task])  # a cancelled request ends this client's turn, not the client

    def _client_classes(self) -> list[int]:
        """Each client's traffic class: the clients dealt out by the last phase's shares (largest remainders
        first), or all of the one class of a scenario without classes."""
        arrival = self.scenario.phases[-1].arrival
        if not isinstance(arrival, Mix) or not arrival.shares:
            return [0] * self.clients
        names = [c.name for c in self.scenario.traffic_classes]
        quotas = [(share * self.clients, names.index(name)) for name, share in arrival.shares]
        counts = {klass: int(quota) for quota, klass in quotas}
        leftover = sorted(quotas, key=lambda item: item[0] - int(item[0]), reverse=True)
        for _, klass in leftover[: self.clients - sum(counts.values())]:
            counts[klass] += 1
        return [klass for klass, count in sorted(counts.items()) for _ in range(count)]

    async def _turn_token(self, until_ns: int) -> bool | None:
        """A client's next turn waits for the attempt cap as its next request would; None when it cannot."""
        return True if await self._cap_token(until_ns) else None

    async def _cap_token(self, until_ns: int) -> bool:
        """Takes a token of the attempt cap for the client's next request, waiting for one while the run goes
        on; False when the run stopped or ``until_ns`` came first."""
        if self.cap is None or (not self._cap_queue.locked() and self.cap.try_take(self.clock.now_ns())):
            return True
        self._cap_delays += 1
        async with self._cap_queue:
            while self._stop_reason is None and (now := self.clock.now_ns()) < until_ns:
                if self.cap.try_take(now):
                    return True
                await asyncio.sleep(min(self.cap.wait_s(now), CAP_POLL_S, (until_ns - now) / NS_PER_S))
        return False
