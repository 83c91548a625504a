"""Retry policies: the decision to retry (which failures, how long to wait, deadlines, budgets) and parsing."""

from __future__ import annotations

import random
from typing import Any

import pytest
import yaml

from cliffwatch.domain.scenario.retry import (
    DEFAULT_RETRY_ON,
    RETRY_ON_WORDS,
    FailureKind,
    Jitter,
    RetryBudget,
    RetryBudgetState,
    RetryDecision,
    RetryKind,
    RetryPolicy,
    decide_retry,
    parse_retry,
)
from cliffwatch.domain.validation import Problems

IMMEDIATE = RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=3)


def _decide(
    policy: RetryPolicy,
    failure: FailureKind = FailureKind.TIMEOUT,
    status: int | None = None,
    *,
    retries_done: int = 0,
    retry_after_s: float | None = None,
    remaining_s: float = 60.0,
    budget: RetryBudgetState | None = None,
    seed: int = 0,
) -> RetryDecision:
    return decide_retry(
        policy,
        failure=failure,
        status=status,
        retries_done=retries_done,
        retry_after_s=retry_after_s,
        remaining_s=remaining_s,
        rng=random.Random(seed),
        budget=budget or RetryBudgetState(None),
    )


def _exponential(**changes: Any) -> RetryPolicy:
    settings: dict[str, Any] = {
        "kind": RetryKind.EXPONENTIAL,
        "max_retries": 10,
        "base_ms": 100.0,
        "cap_ms": 1000.0,
        "multiplier": 2.0,
        "jitter": Jitter.NONE,
    }
    return RetryPolicy(**{**settings, **changes})


# -- which failures are retried --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "status"),
    [(FailureKind.TIMEOUT, None), (FailureKind.CONNECTION, None), (FailureKind.STATUS, 503), (FailureKind.STATUS, 429)],
)
def test_the_none_policy_never_retries(failure: FailureKind, status: int | None) -> None:
    assert _decide(RetryPolicy(), failure, status) == RetryDecision(retry=False, reason="no retries left")


@pytest.mark.parametrize("retries_done", [0, 1, 2])
def test_an_immediate_policy_retries_at_once_while_retries_remain(retries_done: int) -> None:
    assert _decide(IMMEDIATE, retries_done=retries_done) == RetryDecision(retry=True, delay_s=0.0)


def test_an_immediate_policy_stops_after_max_retries() -> None:
    assert _decide(IMMEDIATE, retries_done=3) == RetryDecision(retry=False, reason="no retries left")


@pytest.mark.parametrize(
    ("retry_on", "failure", "status", "retried"),
    [
        (DEFAULT_RETRY_ON, FailureKind.TIMEOUT, None, True),
        (DEFAULT_RETRY_ON, FailureKind.CONNECTION, None, True),
        (DEFAULT_RETRY_ON, FailureKind.TRUNCATED, None, False),
        (DEFAULT_RETRY_ON, FailureKind.STATUS, 429, True),
        (DEFAULT_RETRY_ON, FailureKind.STATUS, 500, True),
        (DEFAULT_RETRY_ON, FailureKind.STATUS, 503, True),
        (DEFAULT_RETRY_ON, FailureKind.STATUS, 599, True),
        (DEFAULT_RETRY_ON, FailureKind.STATUS, 400, False),
        (DEFAULT_RETRY_ON, FailureKind.STATUS, 404, False),
        (DEFAULT_RETRY_ON, FailureKind.STATUS, None, False),
        (DEFAULT_RETRY_ON, FailureKind.CANCELLED, None, False),
        (frozenset({"truncated"}), FailureKind.TRUNCATED, None, True),
        (frozenset({"truncated"}), FailureKind.TIMEOUT, None, False),
        (frozenset({"503"}), FailureKind.STATUS, 503, True),
        (frozenset({"503"}), FailureKind.STATUS, 502, False),
        (frozenset({"503"}), FailureKind.STATUS, 429, False),
        (frozenset({"4xx"}), FailureKind.STATUS, 404, True),
        (frozenset({"4xx"}), FailureKind.STATUS, 429, True),
        (frozenset({"4xx"}), FailureKind.STATUS, 503, False),
        (frozenset({"5xx"}), FailureKind.CONNECTION, None, False),
        (frozenset({"timeout", "connection", "truncated", "4xx", "5xx"}), FailureKind.CANCELLED, None, False),
    ],
)
def test_only_the_failures_named_in_retry_on_are_retried(
    retry_on: frozenset[str], failure: FailureKind, status: int | None, retried: bool
) -> None:
    policy = RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=1, retry_on=retry_on)

    decision = _decide(policy, failure, status)

    assert decision.retry is retried
    assert retried or decision.reason == "not retried on this failure"


@pytest.mark.parametrize("failure", [FailureKind.REDIRECT, FailureKind.REFUSED])
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308, None])
def test_a_redirect_or_a_refused_hop_is_never_retried_whatever_retry_on_says(
    failure: FailureKind, status: int | None
) -> None:
    """Sent again, a redirect is redirected again (following is the client's option, not a retry), and a
    refusal is cliffwatch's own: neither is retried, even by a policy that retries every word it knows."""
    everything = frozenset({*RETRY_ON_WORDS, "301", "302", "303", "307", "308"})
    policy = RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=5, retry_on=everything)

    decision = _decide(policy, failure, status)

    assert not decision.retry
    assert decision.reason == "not retried on this failure"


# -- how long to wait ------------------------------------------------------------------------------


@pytest.mark.parametrize(("retry_number", "ceiling_s"), [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (12, 1.0)])
def test_exponential_backoff_grows_by_the_multiplier_up_to_the_cap(retry_number: int, ceiling_s: float) -> None:
    assert _exponential().backoff_s(retry_number, random.Random(0)) == pytest.approx(ceiling_s)


def test_the_multiplier_sets_the_growth() -> None:
    policy = _exponential(multiplier=3.0, cap_ms=10_000.0)

    assert [policy.backoff_s(n, random.Random(0)) for n in (1, 2, 3)] == pytest.approx([0.1, 0.3, 0.9])


@pytest.mark.parametrize(
    ("jitter", "low_share", "high_share"),
    [(Jitter.FULL, 0.0, 1.0), (Jitter.EQUAL, 0.5, 1.0)],
)
@pytest.mark.parametrize("retry_number", [1, 3, 8])
def test_jitter_spreads_the_delay_over_its_range_below_the_ceiling(
    jitter: Jitter, low_share: float, high_share: float, retry_number: int
) -> None:
    policy = _exponential(jitter=jitter)
    ceiling = min(1.0, 0.1 * 2 ** (retry_number - 1))
    rng = random.Random(retry_number)

    delays = [policy.backoff_s(retry_number, rng) for _ in range(2000)]

    assert all(low_share * ceiling <= d <= high_share * ceiling for d in delays)
    # the range is used, not just a corner of it: both ends come within 5 % of its width
    width = (high_share - low_share) * ceiling
    assert min(delays) < low_share * ceiling + 0.05 * width
    assert max(delays) > high_share * ceiling - 0.05 * width


def test_an_immediate_policy_never_waits() -> None:
    assert IMMEDIATE.backoff_s(5, random.Random(0)) == 0.0


@pytest.mark.parametrize(
    ("retry_after_s", "delay_s"),
    [
        (None, 0.1),  # no header: the backoff
        (0.01, 0.1),  # a shorter Retry-After does not shorten the backoff
        (2.0, 2.0),  # a longer one wins
        (100.0, 30.0),  # capped by retry_after_cap_ms
    ],
)
def test_retry_after_is_honoured_as_the_larger_of_it_and_the_backoff_up_to_its_cap(
    retry_after_s: float | None, delay_s: float
) -> None:
    policy = _exponential(honour_retry_after=True)

    decision = _decide(policy, FailureKind.STATUS, 429, retry_after_s=retry_after_s)

    assert decision.retry
    assert decision.delay_s == pytest.approx(delay_s)


def test_retry_after_is_ignored_unless_honoured() -> None:
    assert _decide(_exponential(), FailureKind.STATUS, 429, retry_after_s=5.0).delay_s == pytest.approx(0.1)


def test_an_immediate_policy_that_honours_retry_after_waits_for_it() -> None:
    policy = RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=1, honour_retry_after=True)

    assert _decide(policy, FailureKind.STATUS, 503, retry_after_s=1.5).delay_s == 1.5


@pytest.mark.parametrize(
    ("remaining_s", "retried"), [(0.5, True), (0.41, True), (0.4, False), (0.1, False), (-1, False)]
)
def test_a_retry_whose_wait_reaches_the_deadline_is_refused(remaining_s: float, retried: bool) -> None:
    policy = _exponential()  # third retry waits 0.4 s

    decision = _decide(policy, retries_done=2, remaining_s=remaining_s)

    assert decision.retry is retried
    assert retried or decision.reason == "deadline before the retry"


def test_an_immediate_retry_with_no_time_left_is_refused() -> None:
    assert _decide(IMMEDIATE, remaining_s=0.0).reason == "deadline before the retry"


# -- the retry budget ------------------------------------------------------------------------------


def test_a_retry_budget_caps_retries_at_ratio_times_requests_plus_reserve_however_hard_the_target_fails() -> None:
    budget = RetryBudgetState(RetryBudget(ratio=0.1, reserve=10))
    policy = RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=3, budget=budget.budget)
    requests, retries, refusals = 1000, 0, 0

    for _ in range(requests):
        budget.on_new_request()
        for done in range(policy.max_retries):
            decision = _decide(policy, retries_done=done, budget=budget)
            if not decision.retry:
                refusals += decision.reason == "retry budget exhausted"
                break
            retries += 1

    assert retries <= 0.1 * requests + 10
    # and no stingier than that: the bucket starts full, so only the first deposit (0.1) and a fraction are lost
    assert retries >= 0.1 * requests + 10 - 2
    assert budget.denied == refusals
    assert budget.denied > 0


def test_without_a_budget_every_retry_is_allowed_and_none_denied() -> None:
    budget = RetryBudgetState(None)

    assert all(budget.try_spend() for _ in range(10_000))
    assert budget.denied == 0


def test_the_budget_refills_by_ratio_per_request_up_to_its_reserve() -> None:
    budget = RetryBudgetState(RetryBudget(ratio=0.5, reserve=2))
    assert budget.try_spend()
    assert budget.try_spend()
    assert not budget.try_spend()

    budget.on_new_request()
    budget.on_new_request()
    assert budget.try_spend()

    for _ in range(100):
        budget.on_new_request()
    assert budget.tokens == 2


def test_a_refund_gives_a_token_back_up_to_the_reserve() -> None:
    """A retry decided (its token spent) but not sent (the attempt cap refused it) costs the budget nothing."""
    budget = RetryBudgetState(RetryBudget(ratio=0.5, reserve=2))
    assert budget.try_spend()
    budget.refund()
    assert budget.tokens == 2
    budget.refund()
    assert budget.tokens == 2
    RetryBudgetState(None).refund()  # no budget: nothing to give back


@pytest.mark.parametrize(
    ("failure", "remaining_s"),
    [(FailureKind.TRUNCATED, 60.0), (FailureKind.TIMEOUT, 0.0)],
)
def test_a_retry_refused_for_another_reason_spends_no_budget(failure: FailureKind, remaining_s: float) -> None:
    budget = RetryBudgetState(RetryBudget(ratio=0.1, reserve=1))
    policy = RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=1, budget=budget.budget)

    assert not _decide(policy, failure, remaining_s=remaining_s, budget=budget).retry
    assert budget.tokens == 1
    assert budget.denied == 0


# -- describe --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "text"),
    [
        (RetryPolicy(), "no retries"),
        (RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=2, retry_on=frozenset({"503"})), "immediate ×2 on 503"),
        (
            _exponential(
                max_retries=3, jitter=Jitter.FULL, honour_retry_after=True, budget=RetryBudget(ratio=0.1, reserve=10)
            ),
            "exponential ×3 on 429, 5xx, connection, timeout; backoff 100–1000 ms, full jitter; honours Retry-After; "
            "budget 10%",
        ),
    ],
)
def test_describe_summarises_the_policy(policy: RetryPolicy, text: str) -> None:
    assert policy.describe() == text


# -- parsing ---------------------------------------------------------------------------------------


def _parse(value: object) -> tuple[RetryPolicy | None, list[str]]:
    problems = Problems()
    result = parse_retry(value, "r", problems)
    return result, [str(p) for p in problems.items]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"policy": "none"}, RetryPolicy()),
        (
            {"policy": "immediate", "max_retries": 2},
            RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=2, base_ms=0, cap_ms=0, multiplier=1, jitter=Jitter.NONE),
        ),
        (
            {"policy": "exponential", "max_retries": 4},
            RetryPolicy(
                kind=RetryKind.EXPONENTIAL, max_retries=4, base_ms=100, cap_ms=5000, multiplier=2, jitter=Jitter.FULL
            ),
        ),
        (
            {
                "policy": "exponential",
                "max_retries": 4,
                "retry_on": ["5xx"],
                "base_ms": 20,
                "cap_ms": 20,
                "multiplier": 1,
                "jitter": "none",
                "honour_retry_after": True,
                "retry_after_cap_ms": 1000,
                "budget": {"ratio": 0.05, "reserve": 3},
            },
            RetryPolicy(
                kind=RetryKind.EXPONENTIAL,
                max_retries=4,
                retry_on=frozenset({"5xx"}),
                base_ms=20,
                cap_ms=20,
                multiplier=1,
                jitter=Jitter.NONE,
                honour_retry_after=True,
                retry_after_cap_ms=1000,
                budget=RetryBudget(ratio=0.05, reserve=3),
            ),
        ),
        (
            {"policy": "immediate", "max_retries": 1, "budget": {"ratio": 0.1}},
            RetryPolicy(
                kind=RetryKind.IMMEDIATE,
                max_retries=1,
                base_ms=0,
                cap_ms=0,
                multiplier=1,
                jitter=Jitter.NONE,
                budget=RetryBudget(ratio=0.1, reserve=10),
            ),
        ),
    ],
)
def test_a_policy_parses_with_its_defaults(value: dict[str, Any], expected: RetryPolicy) -> None:
    assert _parse(value) == (expected, [])


def test_retry_on_reads_words_and_status_codes_whether_yaml_gives_them_as_numbers_or_strings() -> None:
    document = yaml.safe_load("policy: immediate\nmax_retries: 1\nretry_on: [timeout, 503, '504', 5xx, 4xx]\n")

    policy, problems = _parse(document)

    assert problems == []
    assert policy is not None
    assert policy.retry_on == frozenset({"timeout", "503", "504", "5xx", "4xx"})


def test_a_bare_yaml_on_key_is_reported_because_yaml_reads_it_as_true() -> None:
    document = yaml.safe_load("policy: immediate\nmax_retries: 1\non: [timeout]\n")

    assert _parse(document) == (None, ["r: keys must be strings, got True"])


_WORDS = "timeout, connection, truncated, incomplete, 429, 5xx, 4xx or a 4xx/5xx status code"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("immediate", ["r: must be a mapping, got a string"]),
        ({"max_retries": 3}, ["r.policy: is required"]),
        (
            {"policy": "exponentail", "max_retries": 3, "base_ms": 10},
            ["r.policy: must be one of none, immediate, exponential; got 'exponentail'"],
        ),
        ({"policy": "none", "max_retries": 3}, ["r.max_retries: unknown key"]),
        ({"policy": "immediate"}, ["r.max_retries: is required"]),
        ({"policy": "immediate", "max_retries": 0}, ["r.max_retries: must be >= 1"]),
        ({"policy": "immediate", "max_retries": 101}, ["r.max_retries: must be <= 100"]),
        ({"policy": "immediate", "max_retries": 1.5}, ["r.max_retries: must be a whole number, got 1.5"]),
        ({"policy": "immediate", "max_retries": 1, "base_ms": 10}, ["r.base_ms: unknown key"]),
        ({"policy": "immediate", "max_retries": 1, "jitter": "full"}, ["r.jitter: unknown key"]),
        ({"policy": "immediate", "max_retries": 1, "retry_on": []}, ["r.retry_on: must not be empty"]),
        (
            {"policy": "immediate", "max_retries": 1, "retry_on": "timeout"},
            ["r.retry_on: must be a list, got a string"],
        ),
        (
            {"policy": "immediate", "max_retries": 1, "retry_on": ["200"]},
            [f"r.retry_on[0]: must be one of {_WORDS}, got '200'"],
        ),
        (
            {"policy": "immediate", "max_retries": 1, "retry_on": [600]},
            [f"r.retry_on[0]: must be one of {_WORDS}, got 600"],
        ),
        (
            {"policy": "immediate", "max_retries": 1, "retry_on": ["503\n"]},
            [f"r.retry_on[0]: must be one of {_WORDS}, got '503\\n'"],
        ),
        (
            {"policy": "immediate", "max_retries": 1, "retry_on": [True, "reset"]},
            [
                f"r.retry_on[0]: must be one of {_WORDS}, got True",
                f"r.retry_on[1]: must be one of {_WORDS}, got 'reset'",
            ],
        ),
        (
            {"policy": "immediate", "max_retries": 1, "honour_retry_after": "yes"},
            ["r.honour_retry_after: must be true or false, got a string"],
        ),
        (
            {"policy": "exponential", "max_retries": 1, "base_ms": 500, "cap_ms": 100},
            ["r.cap_ms: must be >= base_ms (500)"],
        ),
        ({"policy": "exponential", "max_retries": 1, "multiplier": 0.5}, ["r.multiplier: must be >= 1"]),
        ({"policy": "exponential", "max_retries": 1, "multiplier": 11}, ["r.multiplier: must be <= 10"]),
        ({"policy": "exponential", "max_retries": 1, "base_ms": 0}, ["r.base_ms: must be > 0"]),
        (
            {"policy": "exponential", "max_retries": 1, "jitter": "half"},
            ["r.jitter: must be one of none, full, equal; got 'half'"],
        ),
        ({"policy": "immediate", "max_retries": 1, "budget": 0.1}, ["r.budget: must be a mapping, got a number"]),
        ({"policy": "immediate", "max_retries": 1, "budget": {}}, ["r.budget.ratio: is required"]),
        ({"policy": "immediate", "max_retries": 1, "budget": {"ratio": 0}}, ["r.budget.ratio: must be > 0"]),
        ({"policy": "immediate", "max_retries": 1, "budget": {"ratio": 1.5}}, ["r.budget.ratio: must be <= 1"]),
        (
            {"policy": "immediate", "max_retries": 1, "budget": {"ratio": 0.1, "reserve": 0.5}},
            ["r.budget.reserve: must be >= 1"],
        ),
        (
            {"policy": "immediate", "max_retries": 1, "budget": {"ratio": 0.1, "burst": 1}},
            ["r.budget.burst: unknown key"],
        ),
    ],
)
def test_an_invalid_policy_is_reported_with_its_path(value: object, expected: list[str]) -> None:
    assert _parse(value)[1] == expected


def test_a_huge_number_in_retry_on_is_reported_without_printing_it() -> None:
    policy, problems = _parse({"policy": "immediate", "max_retries": 1, "retry_on": [10**5000]})

    assert policy is None
    assert problems == [f"r.retry_on[0]: must be one of {_WORDS}, got <a number>"]


def test_an_incomplete_answer_is_retried_only_when_retry_on_names_it() -> None:
    """A hollow 200 is not retried by default (the server said it was done); ``incomplete`` opts in."""
    default = RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=1)
    opted = RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=1, retry_on=frozenset({"incomplete"}))

    assert not _decide(default, FailureKind.INCOMPLETE, 200).retry
    assert _decide(opted, FailureKind.INCOMPLETE, 200).retry
