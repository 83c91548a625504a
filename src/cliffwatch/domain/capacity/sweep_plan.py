"""What one step of a capacity sweep sends: the base scenario reduced to a steady load at one rate.

A sweep measures the target as it is, so a step keeps the scenario's target, request shape, SLO and client
settings and drops everything else: its phases (replaced by a warm-up and a measured window at the step's
rate), its faults and proxies (the load goes straight to the target) and its abort guards (an overloaded
step is what a sweep is looking for, not a reason to stop). The client retry policy is the variant's,
unless the variant is the scenario's own. Everything here is pure: same inputs, same step.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from cliffwatch.domain.capacity.arrival_luck import ReferenceReading, ReferenceSlot, WindowRequest
from cliffwatch.domain.capacity.capacity_stats import PERCENTILES, ClassStep, StepStats
from cliffwatch.domain.capacity.growth import Growth, latency_trend, queue_trend
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepMode, SweepSpec
from cliffwatch.domain.outcomes import NS_PER_S, Outcome, RequestRecord, Slo, missed_bounds
from cliffwatch.domain.results.run_metrics import PhaseStats
from cliffwatch.domain.scenario.arrivals import Arrival, Constant, Mix, Poisson
from cliffwatch.domain.scenario.client_spec import ClientSpec
from cliffwatch.domain.scenario.guards import AbortSpec
from cliffwatch.domain.scenario.metrics_spec import Signal
from cliffwatch.domain.scenario.retry import RetryPolicy
from cliffwatch.domain.scenario.scenario import MAX_SEED, Phase, PhaseRole, Scenario
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.traffic.generator_health import GeneratorReport
from cliffwatch.domain.traffic.plan import PhaseWindow

WARMUP = "warm-up"
MEASURED = "measured"
# A step (warm-up + window) this many times the tightest latency bound lets at most ~1/this overload pass:
# above saturation a queue adds (λ − μ)/μ seconds of wait per second, so in T seconds it breaks a bound of
# S seconds only when (λ − μ)/μ > S / T (docs/sweep.md, "Step length").
STEP_SLO_FACTOR = 10
SHORT_STEP = (
    "steps of {step} s (warm-up + window) are shorter than {factor} × the {bound} ms {name} SLO ({need} s): a rate "
    "up to about {overload} % above the target's saturation can still pass, because its queue grows too slowly to "
    "break the SLO within a step. Make --warmup-seconds + --step-seconds at least {need} s to find the cliff within "
    'about {floor} % (docs/sweep.md, "Step length")'
)


def tightest_bound(scenario: Scenario) -> tuple[str, float]:
    """The latency bound a growing queue breaks first: ("TTFT", ms) when the SLO has a tighter TTFT bound
    than its e2e one, else ("e2e", ms); with traffic classes, the tightest of every class's SLO (a class's
    name then says whose). Queue wait adds to all alike."""
    bounds = []
    for klass, traffic_class in enumerate(scenario.traffic_classes):
        slo = scenario.slo_for(klass)
        whose = f"{traffic_class.name} class's " if scenario.classes else ""
        bounds.append((slo.e2e_ms, f"{whose}e2e"))
        if slo.ttft_ms is not None:
            bounds.append((slo.ttft_ms, f"{whose}TTFT"))
    bound_ms, name = min(bounds, key=lambda b: b[0])
    return name, bound_ms


def short_step_warning(scenario: Scenario, spec: SweepSpec) -> str | None:
    """A warning when a rate sweep's steps are too short to see a queue that grows slowly, or None.

    Just above saturation a step ends before its backlog has pushed requests past the SLO, so the rate
    passes (measured on the built-in target: 2-s steps after 1 s of warm-up passed 5–20 % overloads in
    every trial). Nothing in the step shows that reliably (docs/sweep.md), so the remedy is the step's
    length: at least ``STEP_SLO_FACTOR`` × the tightest latency bound. Concurrency sweeps cannot build a
    queue ahead of the target, so they are never warned about.
    """
    if spec.mode is not SweepMode.RATE:
        return None
    name, bound_ms = tightest_bound(scenario)
    step_s = spec.warmup_s + spec.step_s
    need_s = STEP_SLO_FACTOR * bound_ms / 1000
    if step_s >= need_s:
        return None
    return SHORT_STEP.format(
        step=f"{step_s:g}",
        factor=STEP_SLO_FACTOR,
        bound=f"{bound_ms:g}",
        name=name,
        need=f"{need_s:g}",
        overload=f"{100 * bound_ms / 1000 / step_s:.0f}",
        floor=f"{100 / STEP_SLO_FACTOR:.0f}",
    )


def sweep_warnings(scenario: Scenario, spec: SweepSpec) -> tuple[str, ...]:
    """What the sweep of ``scenario`` with ``spec`` should be warned about before it runs, in the order
    shown (empty: nothing). The CLI prints them, the sweep document carries them (``"warnings"``), the API
    returns them when it queues the sweep and the report shows them under its headline."""
    warning = short_step_warning(scenario, spec)
    return () if warning is None else (warning,)


def step_seed(scenario: Scenario, variant: str, rate: float, trial: int) -> int:
    """A seed for one step, derived from the scenario's: repeating a sweep repeats its plans exactly, and
    each trial at a rate draws fresh arrivals (a repeat with the same arrivals would prove little)."""
    digest = hashlib.sha256(f"{scenario.seed}:{variant}:{rate!r}:{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (MAX_SEED + 1)


def measured_index(step: Scenario) -> int:
    """The index of the measured phase in a scenario ``step_scenario`` made."""
    return len(step.phases) - 1


def step_arrival(rate: float, spec: SweepSpec) -> Arrival:
    """The arrival process of a step at ``rate``; in concurrency mode the closed-loop generator ignores it."""
    if spec.mode is SweepMode.RATE and spec.arrival is SweepArrival.CONSTANT:
        return Constant(rate=rate)
    return Poisson(rate=rate)


def with_connections(client: ClientSpec, clients: float) -> ClientSpec:
    """``client`` with room for ``clients`` requests at once: a connection pool and an in-flight limit at
    least that large (a smaller pool would make closed-loop clients queue for a connection in the client,
    measuring the pool instead of the target)."""
    needed = math.ceil(clients)
    if client.pool_size >= needed and client.max_in_flight >= needed:
        return client
    return replace(client, pool_size=max(client.pool_size, needed), max_in_flight=max(client.max_in_flight, needed))


def sweep_client_scenario(scenario: Scenario, spec: SweepSpec) -> Scenario:
    """The scenario the sweep's one HTTP client (shared by every step) is built from: in concurrency mode its
    connection pool holds the highest level's connections; in rate mode it is the scenario's own."""
    if spec.mode is not SweepMode.CONCURRENCY:
        return scenario
    return replace(scenario, client=with_connections(scenario.client, spec.highest_rate))


def step_scenario(
    scenario: Scenario,
    rate: float,
    spec: SweepSpec,
    retry: RetryPolicy | None,
    *,
    variant: str = "",
    trial: int = 1,
    extended: bool = False,
) -> Scenario:
    """The scenario one sweep step runs: a warm-up (``spec.warmup_s``, not measured; absent when 0) and the
    measured window (``spec.step_s``, or ``spec.extended_s`` when ``extended``; always the last phase:
    ``measured_index``) at ``rate``, without
    faults, proxies or abort guards, with ``retry`` as the client's policy (None: the scenario's own, its
    stress phases' override included) and a seed of its own. In concurrency mode ``rate`` is the number of
    clients, and the client's pool and in-flight limit allow that many requests at once.

    Raises ``ValueError`` for a rate that is not > 0.
    """
    if not rate > 0:
        raise ValueError(f"a step needs a rate > 0, got {rate}")
    arrival: Arrival = step_arrival(rate, spec)
    if scenario.classes:  # the step's rate is dealt out to the classes as the scenario's traffic mixes them
        arrival = Mix(whole=arrival, shares=traffic_mix(scenario))
    # As written, a phase-level retry override on the scenario's stress phases is what its clients do under
    # load, so both phases of the step keep it (the first one found); a variant replaces every policy.
    as_written = next((p.retry for p in scenario.phases if p.role is PhaseRole.STRESS and p.retry is not None), None)
    measured_retry = None if retry is not None else as_written
    window = spec.extended_s if extended else spec.step_s
    measured = Phase(name=MEASURED, role=PhaseRole.STRESS, duration_s=window, arrival=arrival, retry=measured_retry)
    phases: tuple[Phase, ...] = (measured,)
    if spec.warmup_s > 0:
        warmup = Phase(
            name=WARMUP, role=PhaseRole.BASELINE, duration_s=spec.warmup_s, arrival=arrival, retry=measured_retry
        )
        phases = (warmup, measured)
    client = scenario.client if retry is None else replace(scenario.client, retry=retry)
    # A variant replaces every policy, a class's own included; as written, each class keeps its own.
    classes = scenario.classes if retry is None else tuple(replace(c, retry=None) for c in scenario.classes)
    if spec.mode is SweepMode.CONCURRENCY:
        client = with_connections(client, rate)  # a level of N clients needs N connections
    return replace(
        scenario,
        target=replace(scenario.target, via_proxy=None),
        client=client,
        classes=classes,
        phases=phases,
        seed=step_seed(scenario, variant, rate, trial),
        proxies=(),
        abort=AbortSpec(),
    )


def traffic_mix(scenario: Scenario) -> tuple[tuple[str, float], ...]:
    """Each traffic class's share of the requests the scenario sends over all its phases (its users' real mix:
    a sweep measures capacity at that mix). A scenario whose phases send nothing shares evenly."""
    sent = {c.name: 0.0 for c in scenario.classes}
    for phase in scenario.phases:
        if isinstance(phase.arrival, Mix):
            for name in sent:
                sent[name] += phase.arrival.class_rate(name, phase.duration_s) * phase.duration_s
    total = math.fsum(sent.values())
    if not total > 0:
        return tuple((name, 1 / len(sent)) for name in sent)
    return tuple((name, amount / total) for name, amount in sent.items() if amount > 0)


class WindowRecords:
    """A record sink for one phase (a step's measured window): its late requests counted by the SLO bound each
    broke (what made a rate fail when no percentile shows it: ``StepStats.late_by``), and each answered
    request's wait against its scheduled time, for the latency trend (``domain.capacity.growth``). The wait is the time
    to the first token when the answer streamed one, else the whole answer's: a queue delays both alike. With
    ``keep_requests``, every request of the step (warm-up included), for the reference queue that corrects a
    Poisson step's verdict for the luck of its draw (``domain.capacity.arrival_luck``, ``reference``)."""

    def __init__(self, phase: int, slos: Sequence[Slo], *, keep_requests: bool = False) -> None:
        self.phase = phase
        self.slos = tuple(slos)  # by traffic class (``Scenario.slo_for``)
        self.counts: Counter[str] = Counter()
        self.waits: list[tuple[float, float]] = []  # (scheduled, wait), seconds from the step's start
        self.floor: float | None = None
        self.keep_requests = keep_requests
        self.requests: list[WindowRequest] = []

    def add(self, record: RequestRecord) -> None:
        final = record.final
        if self.keep_requests:  # one small tuple a request, only when a reference slot will read them
            self.requests.append(
                WindowRequest(record.scheduled_ns / NS_PER_S, None if final is None else final.end_ns / NS_PER_S,
                              record.phase == self.phase, record.outcome is Outcome.ON_TIME)
            )  # fmt: skip
        if final is None:
            return
        wait: float | None = None
        if final.succeeded:
            reached = final.first_token_ns if final.first_token_ns is not None else final.end_ns
            wait = max(0, reached - record.scheduled_ns) / NS_PER_S
            # the least wait of the whole step (it began with no queue): what a request that found none waits
            self.floor = wait if self.floor is None else min(self.floor, wait)
        if record.phase != self.phase:
            return
        if record.outcome is Outcome.LATE:
            slo = self.slos[record.klass]
            self.counts.update(missed_bounds(final, scheduled_ns=record.scheduled_ns, slo=slo))
        if wait is not None:
            self.waits.append((record.scheduled_ns / NS_PER_S, wait))

    async def flush(self) -> None:
        return None

    def reference(self, slot: ReferenceSlot, *, rate: float) -> ReferenceReading | None:
        """The step beside the sweep's reference slot; None when the step has traffic classes (their SLOs
        differ), when the requests were not kept, or when ``slot`` has nothing to say (``ReferenceSlot.read``)."""
        if len(self.slos) != 1 or not self.keep_requests:
            return None
        return slot.read(self.requests, rate=rate, e2e_slo_s=self.slos[0].e2e_ms / 1000)

    def growth(self, window: PhaseWindow, *, rate: float, server: ServerView | None) -> Growth:
        """Whether the queue grew inside ``window``: the latency trend of its requests, and the server's own
        queue when it was scraped."""
        start, end = window.start_ns / NS_PER_S, window.end_ns / NS_PER_S
        queue = None
        waiting = None if server is None else server.signal(Signal.WAITING)
        if server is not None and waiting is not None:
            points = [(t, v) for t, v in zip(server.times_s, waiting.values, strict=True)
                      if v is not None and start <= t < end]  # fmt: skip
            queue = queue_trend(points, rate=rate)
        latency = latency_trend(self.waits, start_s=start, end_s=end, floor_s=self.floor)
        return Growth(latency=latency, queue=queue)


def step_stats(
    measured: PhaseStats,
    generator: GeneratorReport,
    *,
    rate: float,
    trial: int,
    late_by: Mapping[str, int] | None = None,
    growth: Growth | None = None,
    extended: bool = False,
    server: ServerView | None = None,
    classes: Sequence[tuple[str, PhaseStats]] = (),
) -> StepStats:
    """The ``StepStats`` of a step from its measured phase and the generator's verdict on the whole step.

    Outcome counts and latencies are of the requests scheduled in the window; tokens and completions are
    what happened during it (requests from the warm-up finishing in the window included: steady state).
    ``late_by``: the window's late requests by the bound they broke, ``growth`` whether its queue grew
    (``WindowRecords``); ``server``: the target's own series, summarised over the window; ``classes``: each
    traffic class's own stats of the window.
    """
    duration_s = measured.window.duration_s
    counts = {outcome.value: measured.outcomes[outcome] for outcome in Outcome}
    start, end = measured.window.start_ns / NS_PER_S, measured.window.end_ns / NS_PER_S
    readings: dict[str, Mapping[str, float | int | None]] = {}
    if server is not None:
        for series in server.series:
            if series.signal is not None and (stats := server.window(series.signal, start, end)) is not None:
                readings[series.signal.value] = stats.to_dict()

    def percentiles(metric: str) -> dict[str, float | None]:
        histogram = measured.latency[metric]
        return {name: histogram.quantile(int(name[1:]) / 100) for name in PERCENTILES}

    return StepStats(
        rate=rate,
        trial=trial,
        duration_s=duration_s,
        offered=measured.offered,
        on_time=counts["on_time"],
        late=counts["late"],
        shed=counts["shed"],
        timeout=counts["timeout"],
        incomplete=counts["incomplete"],
        error=counts["error"],
        redirect=counts["redirect"],
        not_sent=counts["not_sent"],
        fast_shed=measured.fast_shed,
        sent_rate=measured.sent / duration_s,
        goodput_rps=measured.goodput_rps,
        completions_per_s=measured.completions / duration_s,
        tokens_per_s=measured.tokens_per_s,
        amplification=measured.amplification,
        ttft_ms=percentiles("ttft"),
        itl_ms=percentiles("itl"),
        e2e_ms=percentiles("e2e"),
        # A step the attempt cap held back measured the cap, not the target: invalid, as a lagging generator's.
        generator_limited=generator.limited or generator.capped,
        generator_reasons=generator.reasons
        + ((generator.cap.summary(),) if generator.cap and generator.capped else ()),
        late_by=dict(late_by or {}),
        growth=growth,
        extended=extended,
        workers=len(generator.workers),
        server=readings,
        classes={name: _class_step(stats) for name, stats in classes},
        prompt_error=_prompt_error(measured),
    )


def _prompt_error(stats: PhaseStats) -> dict[str, float]:
    errors = stats.prompt_error
    if not errors.count:
        return {}
    return {"answers": float(errors.count), "mean_pct": round(stats.prompt_error_signed / errors.count, 3),
            "mean_abs_pct": round(errors.total / errors.count, 3)}  # fmt: skip


def _class_step(stats: PhaseStats) -> ClassStep:
    return ClassStep(
        offered=stats.offered, on_time=stats.outcomes[Outcome.ON_TIME],
        ttft_p99_ms=stats.latency["ttft"].quantile(0.99), e2e_p99_ms=stats.latency["e2e"].quantile(0.99),
    )  # fmt: skip
