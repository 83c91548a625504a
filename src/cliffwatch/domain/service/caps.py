"""The caps: limits on what one run may send, judged before it is queued by the worst case it allows.

A run is judged by what it may do, not by what it will probably do: a phase's peak rate times every attempt
its retry policy allows, the largest prompt and answer its distributions can draw, the most connections and
requests in flight its client may hold; a sweep by its highest step. Each refusal is a ``Problem`` naming
the field to change, the worst case and the cap. The one worst case that cannot be known before a run, the
attempt rate of closed-loop clients (it depends on how fast the target answers), is held at run time by the
generator's attempt limiter (a token bucket at ``attempt_limit``), which also holds every other run to the
attempt cap whatever this module let through (docs/security.md, "Caps count what is really sent").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cliffwatch.domain.capacity.sweep_plan import traffic_mix
from cliffwatch.domain.capacity.sweep_spec import AS_WRITTEN, SweepMode, SweepSpec, variant_policy
from cliffwatch.domain.errors import Problem
from cliffwatch.domain.scenario.arrivals import Mix
from cliffwatch.domain.scenario.client_spec import ClientSpec
from cliffwatch.domain.scenario.retry import RetryKind, RetryPolicy
from cliffwatch.domain.scenario.scenario import PhaseRole, Scenario
from cliffwatch.domain.service.file_caps import file_size_violations
from cliffwatch.domain.traffic.rate_limit import RateLimit


@dataclass(frozen=True, kw_only=True)
class Caps:
    """Limits on what one service instance (or one ``cliffwatch run``) will send."""

    max_concurrent_runs: int = 2
    max_offered_rate: float = 1_000.0  # logical requests/s at the peak of any phase
    max_attempt_rate: float = 1_000.0  # attempts/s of one run, retries included: what really leaves
    attempt_burst_s: float = 1.0  # the attempt limiter's bucket holds this many seconds of the attempt cap
    max_duration_s: float = 3_600.0
    max_concurrency: int = 1_000  # closed-loop clients at once (concurrency sweeps)
    max_prompt_tokens: int = 131_072
    max_output_tokens: int = 32_768
    max_pool_size: int = 1_000  # connections one run may open
    max_in_flight: int = 10_000  # requests one run may have outstanding
    max_workers: int = 16  # generator worker processes one run may start (client.workers)

    @property
    def attempt_limit(self) -> RateLimit:
        """What the generator's attempt limiter holds a run to: over any T seconds, at most
        ``max_attempt_rate × (T + attempt_burst_s)`` attempts."""
        return RateLimit.over(self.max_attempt_rate, self.attempt_burst_s)


def retries_per_request(policy: RetryPolicy) -> tuple[float, str]:
    """The most retries a policy adds per request, sustained, and the field that bounds it.

    Without a budget, every request may use all ``max_retries``. A budget bounds retries to ``ratio`` per new
    request over any stretch of time, plus its ``reserve`` once (a token bucket that new requests refill):
    the sustained rate is bounded by ``ratio``, and the reserve is a one-off burst the run-time limiter absorbs.
    """
    if policy.kind is RetryKind.NONE or policy.max_retries == 0:
        return 0.0, ""
    if policy.budget is not None and policy.budget.ratio < policy.max_retries:
        return policy.budget.ratio, "budget.ratio"
    return float(policy.max_retries), "max_retries"


def requests_per_attempt(client: ClientSpec) -> int:
    """The most requests one attempt sends: 1, or with ``follow_redirects`` its first and every hop followed."""
    return 1 + client.max_redirects if client.follow_redirects else 1


def cap_violations(scenario: Scenario, caps: Caps) -> list[Problem]:
    """Why ``scenario`` is over the caps (empty when it is within them), each naming the field to change."""
    problems = request_size_violations(scenario, caps) + client_violations(scenario.client, caps)
    problems += file_size_violations(scenario, max_prompt=caps.max_prompt_tokens, max_output=caps.max_output_tokens)
    # Requests, not arrivals: with sessions each arrival starts a conversation of several turns on average.
    peaks = [(math.fsum(peak * turns_per_arrival(scenario, k) for k, peak in class_peaks(scenario, i)), i)
             for i in range(len(scenario.phases))]  # fmt: skip
    peak, hottest = max(peaks, default=(0.0, 0))
    if peak > caps.max_offered_rate:
        message = (
            f"phase {scenario.phases[hottest].name!r} offers up to {peak:g} requests/s; this service runs at most "
            f"{caps.max_offered_rate:g}/s"
        )
        problems.append(Problem(path=f"phases[{hottest}].arrival", message=message))
    hops = requests_per_attempt(scenario.client)
    worst, index, factor, field = 0.0, 0, 0.0, ""
    # Per phase, every class's peak × (1 + its retries): classes may each retry under their own policy.
    for _, i in peaks:
        attempts, own_factor, own_field = 0.0, 0.0, ""
        for klass, class_peak in class_peaks(scenario, i):
            extra, bound_by = retries_per_request(scenario.retry_for(i, klass))
            attempts += class_peak * turns_per_arrival(scenario, klass) * (1 + extra) * hops
            if extra > own_factor:
                own_factor, own_field = extra, _retry_path(scenario, i, klass, bound_by)
        if attempts > worst:
            worst, index, factor, field = attempts, i, own_factor, own_field
    # Without retries or hops the offered-rate problem already says it, unless the attempt cap is the stricter.
    covered = (factor == 0 and hops == 1 and peak > caps.max_offered_rate
               and caps.max_attempt_rate >= caps.max_offered_rate)  # fmt: skip
    if worst > caps.max_attempt_rate and not covered:
        phase = scenario.phases[index]
        path = field if factor else "client.max_redirects" if hops > 1 else f"phases[{index}].arrival"
        each = f" × up to {hops} requests each (client.max_redirects hops followed)" if hops > 1 else ""
        if len(class_peaks(scenario, index)) > 1:  # each class retries under its own policy
            how = f"{peaks[index][0]:g} requests/s from its classes, each × (1 + its class's retries, up to {factor:g})"
        else:
            how = f"{peaks[index][0]:g} requests/s × (1 + {factor:g} retries each)"
        message = (
            f"phase {phase.name!r} may send up to {worst:g} attempts/s ({how}{each}); this service sends at most "
            f"{caps.max_attempt_rate:g} attempts/s in one run"
        )
        problems.append(Problem(path=path, message=message))
    if scenario.duration_s > caps.max_duration_s:
        message = f"the phases last {scenario.duration_s:g}s; this service runs at most {caps.max_duration_s:g}s"
        problems.append(Problem(path="phases", message=message))
    return problems


def turns_per_arrival(scenario: Scenario, klass: int) -> float:
    """The requests one arrival of class ``klass`` makes on average: its conversation's mean number of turns
    (the run-time attempt cap still holds every second to the cap, whatever the draw), else 1."""
    sessions = scenario.sessions_for(klass)
    return 1.0 if sessions is None else max(1.0, sessions.turns.mean)


def class_peaks(scenario: Scenario, phase: int) -> list[tuple[int, float]]:
    """Each traffic class's peak rate in a phase (the implicit class's, without classes), by class index."""
    arrival = scenario.phases[phase].arrival
    if not isinstance(arrival, Mix):
        return [(0, arrival.peak_rate())]
    peaks = []
    for klass, traffic_class in enumerate(scenario.traffic_classes):
        if arrival.whole is not None:
            peak = arrival.whole.peak_rate() * dict(arrival.shares).get(traffic_class.name, 0.0)
        else:
            peak = math.fsum(a.peak_rate() for name, a in arrival.parts if name == traffic_class.name)
        if peak > 0:
            peaks.append((klass, peak))
    return peaks


def _retry_path(scenario: Scenario, phase: int, klass: int, field: str) -> str:
    """The field that sets the retry policy of class ``klass`` in ``phase``."""
    if scenario.classes and scenario.classes[klass].retry is not None:
        return f"classes.{scenario.classes[klass].name}.retry.{field}"
    return f"phases[{phase}].retry.{field}" if scenario.phases[phase].retry is not None else f"client.retry.{field}"


MAX_ANSWER_BOUND = 32_768  # Caps().max_output_tokens: an unset max_tokens counts as this in a conversation


def _grown_prompt(scenario: Scenario, klass: int) -> tuple[int, str, str] | None:
    """The largest prompt a class's conversation or shared prefix may make, the field that sets it and how;
    None when it sends plain prompts. A conversation that resends its history grows by a turn's prompt and
    answer every turn: its last turn carries every one before it."""
    sessions, prefix = scenario.sessions_for(klass), scenario.prefix_for(klass)
    if sessions is None and prefix is None:
        return None
    template = scenario.request_for(klass)
    prompt = template.prompt_tokens.largest if template.prompt_tokens else 0
    where = f"classes.{scenario.traffic_classes[klass].name}." if scenario.classes else ""
    turns = sessions.turns.largest if sessions is not None and sessions.history else 1
    if prefix is None and turns <= 1:
        return None  # a plain prompt: judged as one
    # An answer without max_tokens is as long as the server likes: the largest this service asks for bounds it.
    answer = template.max_tokens.largest if template.max_tokens else MAX_ANSWER_BOUND
    total = (prefix.tokens if prefix else 0) + turns * prompt + (turns - 1) * answer
    parts = [f"a {prefix.tokens:,}-token prefix"] if prefix else []
    if turns > 1:
        parts.append(f"{turns} turns of up to {prompt:,} prompt and {answer:,} answer tokens")
        return total, f"{where}sessions.turns", " and ".join(parts)
    parts.append(f"a prompt of up to {prompt:,}")
    return total, f"{where}prefix.tokens", " and ".join(parts)


def request_size_violations(scenario: Scenario, caps: Caps) -> list[Problem]:
    """The largest prompt and the largest answer the scenario (each traffic class) may ask for, against the caps."""
    problems: list[Problem] = []
    for klass, traffic_class in enumerate(scenario.traffic_classes):
        template, base = scenario.request_for(klass), scenario.target.request
        grown = _grown_prompt(scenario, klass)
        too_long = grown is not None and grown[0] > caps.max_prompt_tokens
        if grown is not None and too_long:
            total, path, how = grown
            message = (f"may send a prompt of up to {total:,} tokens ({how}); this service sends at most "
                       f"{caps.max_prompt_tokens:,}")  # fmt: skip
            problems.append(Problem(path=path, message=message))
        for key, distribution, inherited, cap, what in (
            ("prompt_tokens", template.prompt_tokens, base.prompt_tokens, caps.max_prompt_tokens, "prompt"),
            ("max_tokens", template.max_tokens, base.max_tokens, caps.max_output_tokens, "answer"),
        ):
            # a class that inherits the size from target.request is reported there, once
            own = scenario.classes and distribution != inherited
            path = f"classes.{traffic_class.name}.request.{key}" if own else f"target.request.{key}"
            if key == "prompt_tokens" and too_long:
                continue  # said above, with what makes it grow
            if distribution is not None and distribution.largest > cap and path not in {p.path for p in problems}:
                message = (
                    f"may ask for a {what} of up to {distribution.largest:,} tokens ({distribution.describe()}); "
                    f"this service sends at most {cap:,}"
                )
                problems.append(Problem(path=path, message=message))
    return problems


def client_violations(client: ClientSpec, caps: Caps) -> list[Problem]:
    """The client's connection pool and in-flight limit against the service's maxima."""
    problems = []
    if client.pool_size > caps.max_pool_size:
        message = (
            f"opens up to {client.pool_size:,} connections; this service opens at most {caps.max_pool_size:,} "
            "in one run"
        )
        problems.append(Problem(path="client.pool_size", message=message))
    if client.max_in_flight > caps.max_in_flight:
        message = (
            f"allows up to {client.max_in_flight:,} requests in flight; this service allows at most "
            f"{caps.max_in_flight:,} in one run"
        )
        problems.append(Problem(path="client.max_in_flight", message=message))
    if client.workers is not None and client.workers > caps.max_workers:
        message = f"starts {client.workers:,} worker processes; this service starts at most {caps.max_workers:,} a run"
        problems.append(Problem(path="client.workers", message=message))
    return problems


def sweep_cap_violations(scenario: Scenario, spec: SweepSpec, caps: Caps) -> list[Problem]:
    """Why a sweep of ``scenario`` with ``spec`` is over the caps (empty when it is within them).

    Its highest step (``stop``, or ``max_rate`` with ``auto``) is judged as a rate or as a number of clients
    at once; in rate mode every retry variant's attempts at that rate; its longest possible length (every
    variant taking ``max_steps`` steps); and the scenario's request sizes and client, which every step keeps.
    """
    problems = request_size_violations(scenario, caps) + client_violations(scenario.client, caps)
    field = "sweep.stop" if spec.stop is not None else "sweep.max_rate"
    highest = spec.highest_rate
    if spec.mode is SweepMode.CONCURRENCY:
        if highest > caps.max_concurrency:
            message = (
                f"the sweep may run up to {highest:g} clients at once; this service runs at most "
                f"{caps.max_concurrency:,}"
            )
            problems.append(Problem(path=field, message=message))
        elif (needed := math.ceil(highest)) > min(caps.max_pool_size, caps.max_in_flight):
            message = (
                f"the sweep's {needed:,} clients need as many connections and requests in flight; this service "
                f"allows at most {caps.max_pool_size:,} connections and {caps.max_in_flight:,} in flight"
            )
            problems.append(Problem(path=field, message=message))
    else:
        if highest > caps.max_offered_rate:
            message = (
                f"the sweep may offer up to {highest:g} requests/s; this service runs at most {caps.max_offered_rate:g}"
            )
            problems.append(Problem(path=field, message=message))
        problems += _variant_violations(scenario, spec, caps)
    longest = spec.max_duration_s()
    if longest > caps.max_duration_s:
        steps = (
            f"{spec.max_steps + 1} steps (max_steps and the recheck)" if spec.rechecks else f"{spec.max_steps} steps"
        )
        message = (
            f"the sweep may last up to {longest:g}s ({len(spec.variants)} variant(s) × {steps} × up "
            f"to {spec.longest_step_s:g}s of warm-up, step (extended: {spec.extended_s:g}s) and cool-down); this "
            f"service runs at most {caps.max_duration_s:g}s: lower max_steps, step_s, extend_s, warmup_s or the "
            "variants"
        )
        problems.append(Problem(path="sweep.max_steps", message=message))
    return problems


def _variant_violations(scenario: Scenario, spec: SweepSpec, caps: Caps) -> list[Problem]:
    """Each retry variant's attempts at the sweep's highest rate, against the attempt cap."""
    problems = []
    for index, variant in enumerate(spec.variants):
        policy = variant_policy(variant)
        extra = retries_per_request(policy)[0] if policy is not None else _as_written_retries(scenario)
        hops = requests_per_attempt(scenario.client)
        worst = spec.highest_rate * _step_turns(scenario) * (1 + extra) * hops
        if (extra or hops > 1) and worst > caps.max_attempt_rate:
            shown = "the scenario's own policy" if variant == AS_WRITTEN else variant
            message = (
                f"the sweep may send up to {worst:g} attempts/s ({spec.highest_rate:g} requests/s × (1 + {extra:g} "
                f"retries each) under {shown}{f' × up to {hops} requests each' if hops > 1 else ''}); this service "
                f"sends at most {caps.max_attempt_rate:g} attempts/s in one run"
            )
            problems.append(Problem(path=f"sweep.variants[{index}]", message=message))
    return problems


def _step_turns(scenario: Scenario) -> float:
    """The requests one arrival of a sweep step makes on average: turns, at the scenario's traffic mix."""
    if not scenario.classes:
        return turns_per_arrival(scenario, 0)
    shares = dict(traffic_mix(scenario))
    return math.fsum(shares.get(c.name, 0.0) * turns_per_arrival(scenario, k) for k, c in enumerate(scenario.classes))


def _as_written_retries(scenario: Scenario) -> float:
    """The retries per request a sweep step makes as written: each traffic class's own policy (else the
    scenario's, ``_as_written``) weighted by the class's share of the step (``sweep_plan.traffic_mix``)."""
    fallback, _ = retries_per_request(_as_written(scenario))
    if not scenario.classes:
        return fallback
    shares = dict(traffic_mix(scenario))
    return math.fsum(
        shares.get(c.name, 0.0) * (retries_per_request(c.retry)[0] if c.retry is not None else fallback)
        for c in scenario.classes
    )


def _as_written(scenario: Scenario) -> RetryPolicy:
    """The policy a sweep step keeps as written (``sweep_plan.step_scenario``): the first stress phase's
    override, else the client's."""
    stressed = (p.retry for p in scenario.phases if p.role is PhaseRole.STRESS and p.retry is not None)
    return next(stressed, scenario.client.retry)
