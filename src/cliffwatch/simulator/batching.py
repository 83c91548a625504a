"""The continuous-batching state machine of the simulated target, with time passed in.

Everything that decides *what* the engine does lives here: the FIFO waiting queue, the running batch,
admission (queue limit, queue deadline), how long a step takes, which sequences get a token at the end
of it, cancellation, and the counters ``/metrics`` reports. Nothing here awaits or reads a clock: every
method that depends on time takes ``now`` (seconds on the engine's monotonic clock), so tests drive it
step by step with made-up times. The asyncio step loop that calls it is in ``engine.py``.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.scenario.target_model import Admission, Scheduling, TargetModel
from cliffwatch.simulator.prefix_cache import PrefixCache, continued
from cliffwatch.simulator.sequences import EngineRequest, Result, SeqState
from cliffwatch.simulator.waiting import WaitingQueue

_WORDS = (
    "the of and to in is that for it as with was on be by at this from or an are not but have "
    "which one all were when there can more if has been will would so what out about up into "
    "than them some time only could new these two may first then do any like my now over such "
    "our man me even most made after also did many before must through back years where much "
    "your way well down should because each just those people how too little state good very "
    "make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right"
)
# Every token is one word plus a space, so the text is readable and its tokens countable as words.
VOCABULARY: tuple[str, ...] = tuple(f"{word} " for word in _WORDS.split())


class QueueFull(CliffwatchError):
    """The waiting queue already holds ``max_queue`` requests (admission ``queue_limit``): answer 429."""

    def __init__(self, *, queued: int, limit: int, retry_after_s: int) -> None:
        self.queued = queued
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(f"the waiting queue is full ({queued} of {limit} requests); retry later")


def retry_after_header(retry_after_s: float) -> int:
    """Whole seconds for a ``Retry-After`` header: rounded up, and at least 1 unless the setting is 0."""
    if retry_after_s <= 0:
        return 0
    return max(1, math.ceil(retry_after_s))


@dataclass(frozen=True, kw_only=True)
class BatchStep:
    """What :meth:`BatchCore.begin_step` decided: the batch to decode and how long that takes."""

    started_at: float
    duration_s: float
    batch: int  # 0 means there is nothing to run
    admitted: tuple[EngineRequest, ...]
    dropped: tuple[EngineRequest, ...]  # waited past the deadline, ended with 503
    interrupted: tuple[EngineRequest, ...] = ()  # ended early to make room (``interrupt_when_full``)


@dataclass(frozen=True, kw_only=True)
class EngineStats:
    """A consistent snapshot of the gauges and counters ``/metrics`` exposes."""

    waiting: int
    running: int
    max_batch: int
    results: dict[Result, int]
    prompt_tokens_total: int  # prefilled, i.e. counted when a request is admitted into the batch
    generation_tokens_total: int  # including the tokens of sequences aborted later
    steps_total: int
    queue_time_seconds_sum: float = 0.0  # waited in the queue by the requests admitted so far
    queue_time_count: int = 0  # requests admitted into the batch
    preemptions_total: int = 0  # sequences preempted to give a tenant its fair share
    prefix_cache_queries_total: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits_total: int = 0  # of those, found cached (their prefill skipped)
    kv_cache_usage: float = 0.0  # the running sequences' tokens over the KV cache's, 0–1


class BatchCore:
    """The scheduler of one simulated engine: a FIFO queue feeding a batch of at most ``max_batch``.

    The caller alternates :meth:`begin_step` and :meth:`end_step`, passing the step's start and end
    times; between them it may :meth:`submit`, :meth:`cancel` and :meth:`expire` at any time.
    """

    def __init__(self, model: TargetModel) -> None:
        self.model = model
        # In arrival order, handed out in the model's order (target.waiting), O(1) removal when a client leaves.
        self._waiting: WaitingQueue[EngineRequest] = WaitingQueue(model.scheduling)
        self._running: dict[int, EngineRequest] = {}
        # Cancelled during a step: like vLLM, an abort takes effect between steps, so the step in
        # flight still computes (and counts) their token.
        self._aborting: list[EngineRequest] = []
        self._next_id = 1
        self._jitter = random.Random(model.seed)
        self._in_step = False
        self._max_wait_s = model.max_queue_wait_ms / 1000.0 if model.admission is Admission.DEADLINE else None
        self._results = dict.fromkeys(Result, 0)
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._steps = 0
        self._queue_time_s = 0.0
        self._admitted = 0
        self._holding: Counter[str] = Counter()  # running sequences by tenant (fair scheduling)
        self._preemptions = 0
        self._cache = PrefixCache(capacity_blocks=model.kv_cache_tokens // model.block_tokens if model.prefix_caching
                                  else 0, block_tokens=model.block_tokens)  # fmt: skip

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def stats(self) -> EngineStats:
        return EngineStats(
            waiting=len(self._waiting),
            running=len(self._running),
            max_batch=self.model.max_batch,
            results=dict(self._results),
            prompt_tokens_total=self._prompt_tokens,
            generation_tokens_total=self._generation_tokens,
            steps_total=self._steps,
            queue_time_seconds_sum=self._queue_time_s,
            queue_time_count=self._admitted,
            preemptions_total=self._preemptions,
            prefix_cache_queries_total=self._cache.queries_total,
            prefix_cache_hits_total=self._cache.hits_total,
            kv_cache_usage=min(1.0, sum(r.prompt_tokens + len(r.tokens) for r in self._running.values())
                               / self.model.kv_cache_tokens),
        )  # fmt: skip

    def record_bad_request(self) -> None:
        """Counts a request the server refused before it reached the engine (400, 404, 413)."""
        self._results[Result.BAD_REQUEST] += 1

    def submit(
        self,
        *,
        prompt_tokens: int,
        max_tokens: int,
        now: float,
        streaming: bool = True,
        priority: int = 0,
        tenant: str = "",
        blocks: tuple[int, ...] = (),
        tail: tuple[str, ...] = (),
    ) -> EngineRequest:
        """Queues a new sequence and returns it; raises ``QueueFull`` when admission refuses it."""
        if self.model.admission is Admission.QUEUE_LIMIT:
            # Requests that will take a free batch slot at the next step boundary are not really
            # queued; without this, max_queue 0 would refuse work even on an idle engine.
            free_slots = max(0, self.model.max_batch - len(self._running))
            queued = len(self._waiting) - free_slots
            if queued >= self.model.max_queue:
                self._results[Result.REJECTED_429] += 1
                raise QueueFull(
                    queued=len(self._waiting),
                    limit=self.model.max_queue,
                    retry_after_s=retry_after_header(self.model.retry_after_s),
                )
        request_id = self._next_id
        self._next_id += 1
        request = EngineRequest(
            id=request_id,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            arrived_at=now,
            # Seeding per (seed, id) keeps each request's text independent of how batches interleave.
            rng=random.Random(f"{self.model.seed}:{request_id}"),
            streaming=streaming,
            priority=priority,
            tenant=tenant,
            blocks=blocks if self.model.prefix_caching else (),
            tail=tail if self.model.prefix_caching else (),
        )
        self._waiting.push(request)
        return request

    def cancel(self, request: EngineRequest, now: float) -> bool:
        """Removes a waiting or running sequence whose client went away; False if it had already ended.

        Tokens a running sequence produced stay counted as generated: the engine did that work. One
        cancelled during a step still gets that step's token; its slot is free for the next step.
        """
        if request.state is SeqState.WAITING:
            self._waiting.remove(request)
        elif request.state is SeqState.RUNNING:
            del self._running[request.id]
            if self._in_step:
                self._aborting.append(request)
        else:
            return False
        self._end(request, Result.ABORTED_DISCONNECT, now)
        return True

    def next_deadline(self) -> float | None:
        """When the oldest waiting request runs out of queue time, or None if nothing can expire."""
        if self._max_wait_s is None or not self._waiting:
            return None
        oldest = self._waiting.oldest()
        assert oldest is not None
        return oldest.arrived_at + self._max_wait_s

    def expire(self, now: float) -> list[EngineRequest]:
        """Drops (503) the waiting requests that have waited ``max_queue_wait_ms`` by ``now``."""
        if self._max_wait_s is None:
            return []
        dropped: list[EngineRequest] = []
        # The queue is in arrival order, so the expired requests are exactly a prefix of it.
        while (oldest := self._waiting.oldest()) is not None:
            # The same float expression as next_deadline(): `now - arrived < wait` can stay true at
            # now == arrived + wait through rounding, and a loop waking at that deadline would spin.
            if now < oldest.arrived_at + self._max_wait_s:
                break
            self._waiting.remove(oldest)
            self._end(oldest, Result.DROPPED_DEADLINE_503, now)
            dropped.append(oldest)
        return dropped

    def begin_step(self, now: float) -> BatchStep:
        """Expires overdue requests, fills free batch slots in FIFO order, and returns the step to run.

        The step lasts ``step_ms(batch)`` plus the prefill of every sequence admitted now: prefill
        stalls the decode of everyone else, as in engines without chunked prefill.
        """
        if self._in_step:
            raise RuntimeError("begin_step called twice without end_step")
        dropped = self.expire(now)
        interrupted = self._interrupt(now) if self.model.interrupt_when_full else []
        if self.model.scheduling is Scheduling.FAIR:
            self._preempt_over_share()
        admitted: list[EngineRequest] = []
        while self._waiting and len(self._running) < self.model.max_batch:
            request = self._admit_next()
            if request is None:
                break
            request.state = SeqState.RUNNING
            self._holding[request.tenant] += 1
            request.admitted_at = now
            self._running[request.id] = request
            self._prompt_tokens += request.prompt_tokens
            if self.model.prefix_caching:
                request.cached_tokens = self._cache.lookup(request.blocks, request.prompt_tokens)
            self._queue_time_s += now - request.arrived_at
            self._admitted += 1
            admitted.append(request)
        for request in admitted:  # computed in this step: the next steps' prompts may reuse them, not this one's
            self._cache.insert(request.blocks)
        batch = len(self._running)
        if batch == 0:
            return BatchStep(started_at=now, duration_s=0.0, batch=0, admitted=(), dropped=tuple(dropped),
                        interrupted=tuple(interrupted))  # fmt: skip
        # A preempted sequence is recomputed: its prompt and the tokens it had are prefilled again; the part of
        # its prompt found in the prefix cache is not.
        duration_ms = self.model.step_ms(batch) + sum(
            self.model.prefill_ms(r.prompt_tokens - r.cached_tokens + (len(r.tokens) if r.preemptions else 0))
            for r in admitted
        )
        if self.model.step_jitter > 0:
            duration_ms *= 1.0 + self._jitter.uniform(-self.model.step_jitter, self.model.step_jitter)
        self._in_step = True
        return BatchStep(
            started_at=now,
            duration_s=duration_ms / 1000.0,
            batch=batch,
            admitted=tuple(admitted),
            dropped=tuple(dropped),
            interrupted=tuple(interrupted),
        )

    def _preempt_over_share(self) -> None:
        """With the batch full and a tenant below its fair share waiting, preempts the newest sequence of the
        tenant furthest over its share, back to the head of that tenant's queue, as vLLM preempts by recompute
        (``vllm/v1/core/sched/scheduler.py``): a burst that took every slot gives them back as the steady
        tenant needs them, instead of only as its own long answers end."""
        while len(self._running) >= self.model.max_batch and self._waiting:
            waiting = self._waiting.tenants()
            demand = waiting | {t for t, n in self._holding.items() if n > 0}
            share = self.model.max_batch / max(1, len(demand))
            if not any(self._holding[t] < share - 1e-9 for t in waiting):
                return
            over = [t for t, n in self._holding.items() if n > share + 1e-9]
            if not over:
                return
            tenant = max(over, key=lambda t: self._holding[t])
            victim = max((r for r in self._running.values() if r.tenant == tenant),
                         key=lambda r: (r.admitted_at or 0.0, r.id))  # fmt: skip
            del self._running[victim.id]
            self._holding[tenant] -= 1
            victim.state = SeqState.WAITING
            victim.preemptions += 1
            self._preemptions += 1
            self._waiting.push_front(victim)

    def _admit_next(self) -> EngineRequest | None:
        """The next waiting request to take a free slot. Under fair scheduling a tenant is held to its share of
        the batch (max_batch over the tenants that wait or run) while another tenant waits: a burst cannot take
        every slot from a steady tenant. With nobody else waiting the slots are anyone's (work-conserving)."""
        if self.model.scheduling is not Scheduling.FAIR:
            return self._waiting.pop_next()
        demand = self._waiting.tenants() | {t for t, n in self._holding.items() if n > 0}
        share = self.model.max_batch / max(1, len(demand))
        fair = self._waiting.pop_next(lambda tenant: self._holding[tenant] < share)
        return fair if fair is not None else self._waiting.pop_next()

    def _interrupt(self, now: float) -> list[EngineRequest]:
        """Ends the oldest running streams, one per request waiting beyond the free slots, so the waiting
        ones are admitted now; each ends with the tokens it had (often only its first), and no finish."""
        wanted = len(self._waiting) - (self.model.max_batch - len(self._running))
        interrupted: list[EngineRequest] = []
        for request in list(self._running.values()):  # in admission order: the oldest first
            if len(interrupted) >= wanted:
                break
            if request.streaming:
                del self._running[request.id]
                self._end(request, Result.INTERRUPTED, now)
                interrupted.append(request)
        return interrupted

    def end_step(self, now: float) -> list[EngineRequest]:
        """Gives every running sequence one token; returns them (finished ones are now ENDED)."""
        if not self._in_step:
            raise RuntimeError("end_step called without begin_step")
        self._in_step = False
        self._steps += 1
        emitted = list(self._running.values())
        for request in emitted:
            request.tokens.append(request.rng.choice(VOCABULARY))
            if request.first_token_at is None:
                request.first_token_at = now
            if len(request.tokens) >= request.max_tokens:
                del self._running[request.id]
                self._end(request, Result.COMPLETED, now)
        for request in self._aborting:
            request.tokens.append(request.rng.choice(VOCABULARY))
        self._generation_tokens += len(emitted) + len(self._aborting)
        self._aborting.clear()
        return emitted

    def abort_all(self, now: float) -> list[EngineRequest]:
        """Ends every waiting and running sequence because the engine is shutting down."""
        ended = [*self._waiting, *self._running.values()]
        self._waiting = WaitingQueue(self.model.scheduling)
        self._running.clear()
        self._aborting.clear()
        self._in_step = False
        for request in ended:
            self._end(request, Result.ABORTED_SHUTDOWN, now)
        return ended

    def _end(self, request: EngineRequest, result: Result, now: float) -> None:
        if request.state is SeqState.RUNNING:
            self._holding[request.tenant] -= 1
        request.state = SeqState.ENDED
        request.result = result
        request.ended_at = now
        if result is Result.COMPLETED and self.model.prefix_caching:  # its answer's blocks stay cached too
            self._cache.insert(continued(request.blocks, request.tail, [t.strip() for t in request.tokens],
                                         self.model.block_tokens))  # fmt: skip
        self._results[result] += 1
