"""Conversations and shared prefixes: what a scenario may say, what the plan draws, how conversations are
counted when their turns come back."""

from __future__ import annotations

import copy
import random
from collections import Counter
from typing import Any

import pytest

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.conversations import (
    TURN_ID_BASE,
    ConversationBook,
    PrefixChooser,
    PrefixPer,
    PrefixSpec,
    pooled,
    turn_id,
)
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.traffic.plan import iter_plan, later_turns_of

DATASET = {"path": "d.jsonl", "format": "jsonl"}
CHAT: dict[str, Any] = {
    "name": "chats",
    "seed": 9,
    "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "prompt_tokens": 32, "max_tokens": 16}},
    "slo": {"e2e_ms": 2000, "timeout_ms": 6000},
    "sessions": {"turns": {"dist": "uniform", "min": 2, "max": 5}, "think_time_ms": 1000},
    "prefix": {"groups": 3, "tokens": 500},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 20, "arrival": {"process": "poisson", "rate": 2}}],
}


def document(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(CHAT)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def problems(doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(doc)
    return {p.path: p.message for p in caught.value.problems}


def test_sessions_and_prefix_are_read_with_their_defaults() -> None:
    scenario = parse_scenario(document())
    sessions, prefix = scenario.sessions_for(0), scenario.prefix_for(0)
    assert sessions is not None
    assert sessions.history is True
    assert sessions.turns.largest == 5
    assert prefix == PrefixSpec(groups=3, tokens=500, per=PrefixPer.CONVERSATION)  # the default with sessions
    single = parse_scenario(document(sessions=None))
    assert single.prefix_for(0) == PrefixSpec(groups=3, tokens=500, per=PrefixPer.REQUEST)


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"sessions": {"turns": 0}}, "sessions.turns", "must be >= 1"),
        ({"sessions": {"turns": 2, "think_time_ms": -1}}, "sessions.think_time_ms", "must be >= 0"),
        ({"sessions": {"turns": 2, "remember": True}}, "sessions.remember", "unknown"),
        ({"prefix": {"groups": 0, "tokens": 10}}, "prefix.groups", "must be >= 1"),
        ({"sessions": None, "prefix": {"groups": 2, "tokens": 10, "per": "conversation"}}, "prefix.per",
         "needs sessions"),
        ({"target": {"url": "http://127.0.0.1:8000", "api": "http"}}, "sessions", "OpenAI APIs"),
        ({"target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "dataset": DATASET}}}, "sessions",
         "cannot draw from request.dataset"),
    ],
)  # fmt: skip
def test_a_bad_conversation_or_prefix_is_named_with_its_reason(changes: dict[str, Any], path: str, words: str) -> None:
    found = problems(document(**changes))
    assert path in found, found
    assert words in found[path]


def test_each_arrival_starts_a_conversation_whose_later_turns_are_drawn_the_same_every_time() -> None:
    scenario = parse_scenario(document())
    planned = list(iter_plan(scenario))
    assert planned
    assert all(r.turn == 1 and r.conversation == r.id for r in planned)
    assert {r.turns for r in planned} <= {2, 3, 4, 5}
    first = planned[0]
    turns = later_turns_of(scenario, 0, first.conversation, first.prefix)
    assert len(turns) == first.turns - 1
    assert turns == later_turns_of(scenario, 0, first.conversation, first.prefix)
    assert {t.think_ms for t in turns} == {1000}
    assert all(t.prefix == first.prefix for t in turns)  # the conversation keeps its system prompt
    assert {t.prompt_tokens for t in turns} == {32}


def test_a_prefix_is_drawn_per_request_without_touching_what_else_the_plan_draws() -> None:
    plain = [(r.scheduled_ns, r.prompt_tokens) for r in iter_plan(parse_scenario(document(sessions=None,
                                                                                          prefix=None)))]  # fmt: skip
    prefixed = list(iter_plan(parse_scenario(document(sessions=None))))
    assert [(r.scheduled_ns, r.prompt_tokens) for r in prefixed] == plain
    assert {r.prefix for r in prefixed} == {0, 1, 2}
    assert all(r.turn == 0 and r.conversation == -1 for r in prefixed)


def test_zipf_popularity_makes_the_first_prefix_the_most_used() -> None:
    chooser = PrefixChooser(PrefixSpec(groups=4, tokens=10, zipf=1.0), random.Random(1))
    counts = Counter(chooser.next() for _ in range(12_000))
    # 1 : 1/2 : 1/3 : 1/4 of 25/12: 48 %, 24 %, 16 %, 12 %
    assert counts[0] / 12_000 == pytest.approx(0.48, abs=0.02)
    assert counts[3] / 12_000 == pytest.approx(0.12, abs=0.02)
    assert PrefixChooser(None, random.Random(1)).next() == -1


def test_turn_ids_are_unique_and_above_the_plans() -> None:
    assert turn_id(7, 1) == 7
    ids = {turn_id(conversation, turn) for conversation in range(50) for turn in range(2, 101)}
    assert len(ids) == 50 * 99
    assert min(ids) > TURN_ID_BASE


def test_a_conversation_is_completed_on_time_only_when_every_turn_was_and_cut_ones_are_apart() -> None:
    book = ConversationBook(2)
    for turn in (1, 2, 3):  # completed, every turn on time
        book.add(conversation=1, turn=turn, turns=3, phase=0, on_time=True, succeeded=True)
    book.add(conversation=2, turn=1, turns=2, phase=0, on_time=True, succeeded=True)  # completed, one late turn
    book.add(conversation=2, turn=2, turns=2, phase=1, on_time=False, succeeded=True)
    book.add(conversation=3, turn=1, turns=4, phase=0, on_time=False, succeeded=False)  # failed: ended there
    book.add(conversation=4, turn=1, turns=4, phase=1, on_time=True, succeeded=True)  # cut by the run's end
    started, later = book.result()
    assert (started.started, started.completed, started.completed_on_time, started.failed, started.cut) == (
        3, 2, 1, 1, 0)  # fmt: skip
    assert started.on_time_ratio == pytest.approx(1 / 3)  # of the 3 that ended on their own
    assert (later.started, later.cut, later.on_time_ratio) == (1, 1, None)
    total = pooled([started, later])
    assert (total.turns, total.turns_on_time) == (7, 5)
    assert total.to_dict()["turns_per_conversation"] == 1.75


def test_a_class_may_send_single_requests_while_the_scenario_holds_conversations() -> None:
    doc = document(prefix=None, classes={"chat": {}, "batch": {"sessions": False}})
    doc["phases"][0]["arrival"] = {"process": "poisson", "rate": 4, "share": {"chat": 1, "batch": 1}}
    scenario = parse_scenario(doc)
    assert scenario.sessions_for(0) is not None
    assert scenario.sessions_for(1) is None
    planned = list(iter_plan(scenario))
    assert {r.turn for r in planned if r.klass == 1} == {0}
    assert {r.turn for r in planned if r.klass == 0} == {1}
    inherits = copy.deepcopy(doc)
    inherits["prefix"] = {"groups": 2, "tokens": 10}
    assert "classes.batch" in problems(inherits)  # a per-conversation prefix on single requests


def test_a_first_turn_never_sent_starts_no_conversation() -> None:
    """A stop (or a full generator) leaves the rest of the plan unsent: those are not conversations that
    failed, they never began."""
    book = ConversationBook(1)
    book.add(conversation=5, turn=1, turns=3, phase=0, on_time=False, succeeded=False, attempted=False)
    book.add(conversation=6, turn=1, turns=3, phase=0, on_time=False, succeeded=False, attempted=True)
    (stats,) = book.result()
    assert (stats.started, stats.failed) == (1, 1)
