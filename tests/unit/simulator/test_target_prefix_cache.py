"""The simulated target's prefix cache: chained block hashes, the prefill it saves, eviction, and the
figures /metrics reports (as vLLM's automatic prefix caching counts them)."""

from __future__ import annotations

import pytest

from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.simulator.batching import BatchCore
from cliffwatch.simulator.openai_format import Kind, parse_generation
from cliffwatch.simulator.prefix_cache import PrefixCache, block_hashes
from cliffwatch.simulator.prometheus import render

SYSTEM = " ".join(f"rule{i}" for i in range(64))  # 64 words: four blocks of 16


def hashes(text: str, block: int = 16) -> tuple[int, ...]:
    return block_hashes(text.split(), block)


def test_a_block_hash_covers_everything_before_it_so_only_a_shared_prefix_matches() -> None:
    same_start = hashes(SYSTEM + " question one")
    other_start = hashes("hello " + SYSTEM)
    assert len(same_start) == 4  # the 2 words after the prefix do not fill a block
    assert same_start == hashes(SYSTEM + " question two")
    assert not set(same_start) & set(other_start)  # the same words, shifted by one: no block in common


def test_the_leading_cached_blocks_are_hits_and_the_last_token_is_always_computed() -> None:
    cache = PrefixCache(capacity_blocks=100, block_tokens=16)
    first = hashes(SYSTEM + " " + " ".join(["q"] * 20))  # 84 words: 5 full blocks
    assert cache.lookup(first, 84) == 0
    cache.insert(first)
    second = hashes(SYSTEM + " " + " ".join(["z"] * 20))
    assert cache.lookup(second, 84) == 64  # the four system blocks; the question's own block differs
    assert cache.lookup(hashes(SYSTEM), 64) == 63  # all cached: the last token is computed anyway
    assert (cache.queries_total, cache.hits_total) == (84 + 84 + 64, 64 + 63)


def test_the_least_recently_used_blocks_are_evicted_beyond_capacity() -> None:
    cache = PrefixCache(capacity_blocks=4, block_tokens=16)
    cache.insert(hashes(SYSTEM))
    cache.insert(hashes(" ".join(f"other{i}" for i in range(64))))
    assert cache.blocks == 4
    assert cache.lookup(hashes(SYSTEM), 64) == 0  # evicted by the other prompt's blocks


def model(**changes: object) -> TargetModel:
    base = {"max_batch": 4, "decode_base_ms": 10.0, "decode_per_seq_ms": 0.0, "prefill_base_ms": 0.0,
            "prefill_per_token_ms": 1.0}  # fmt: skip
    return TargetModel(**{**base, **changes})  # type: ignore[arg-type]


def admitted_prefill_ms(core: BatchCore, text: str, now: float) -> float:
    """The first step of a prompt admitted alone, less the decode step: its prefill."""
    words = text.split()
    core.submit(prompt_tokens=len(words), max_tokens=1, now=now, blocks=block_hashes(words, 16))
    step = core.begin_step(now)
    core.end_step(now + step.duration_s)
    return step.duration_s * 1000 - core.model.step_ms(1)


def test_a_cached_prefix_is_not_prefilled_again_and_off_it_always_is() -> None:
    prompt = SYSTEM + " " + " ".join(["q"] * 8)  # 72 words
    cached = BatchCore(model())
    assert admitted_prefill_ms(cached, prompt, 0.0) == pytest.approx(72)
    assert admitted_prefill_ms(cached, SYSTEM + " " + " ".join(["x"] * 8), 1.0) == pytest.approx(8)
    stats = cached.stats()
    assert (stats.prefix_cache_queries_total, stats.prefix_cache_hits_total) == (144, 64)
    plain = BatchCore(model(prefix_caching=False))
    assert admitted_prefill_ms(plain, prompt, 0.0) == pytest.approx(72)
    assert admitted_prefill_ms(plain, prompt, 1.0) == pytest.approx(72)
    assert plain.stats().prefix_cache_hits_total == 0


def test_the_server_reads_the_prompt_words_of_every_message_into_blocks() -> None:
    body = {"model": "sim-llm", "messages": [{"role": "system", "content": SYSTEM},
                                             {"role": "user", "content": "what now"}]}  # fmt: skip
    parsed = parse_generation(body, Kind.CHAT, TargetModel())
    assert parsed.prompt_tokens == 66
    assert parsed.blocks == hashes(SYSTEM + " what now")
    assert parse_generation(body, Kind.CHAT, TargetModel(prefix_caching=False)).blocks == ()


def test_metrics_report_the_cache_and_the_kv_usage_of_the_running_batch() -> None:
    core = BatchCore(model(kv_cache_tokens=200))
    core.submit(prompt_tokens=64, max_tokens=5, now=0.0, blocks=hashes(SYSTEM))
    core.submit(prompt_tokens=64, max_tokens=5, now=0.0, blocks=hashes(SYSTEM))
    step = core.begin_step(0.0)
    core.end_step(step.duration_s)  # both prefilled in one step: neither could reuse blocks not yet computed
    page = render(core.stats())
    assert "cliffwatch_target_prefix_cache_queries_total 128" in page
    assert "cliffwatch_target_prefix_cache_hits_total 0" in page
    assert "cliffwatch_target_kv_cache_usage_ratio 0.65" in page  # (64 + 1) × 2 tokens of 200


def test_a_finished_answer_stays_cached_for_the_next_turn_that_resends_it() -> None:
    """vLLM caches the blocks of generated tokens too: a conversation's next turn (its prompt, the answer, a
    new question) finds both the first prompt and the answer in the cache."""
    core = BatchCore(model(max_batch=1))
    first = (SYSTEM + " " + " ".join(["q"] * 8)).split()  # 72 words: 4 full blocks and 8 words of tail
    blocks = block_hashes(first, 16)
    done = core.submit(prompt_tokens=len(first), max_tokens=40, now=0.0, blocks=blocks,
                       tail=tuple(first[len(blocks) * 16 :]))  # fmt: skip
    now = 0.0
    while core.has_work:
        step = core.begin_step(now)
        now += step.duration_s
        core.end_step(now)
    answer = "".join(done.tokens).split()
    assert len(answer) == 40
    second = [*first, *answer, "and", "then", "what"]  # 115 words: 7 full blocks
    cache = core._cache  # the core's own cache, as the next turn's admission reads it
    assert cache.lookup(block_hashes(second, 16), len(second)) == 112  # 72 + 40 words = 7 blocks of 16
