"""The batching core, driven step by step with made-up times: no loop, no clock, exact numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cliffwatch.domain.scenario.target_model import Admission, Scheduling, TargetModel
from cliffwatch.simulator.batching import VOCABULARY, BatchCore, QueueFull, retry_after_header
from cliffwatch.simulator.sequences import EngineRequest, Result, SeqState

MODEL = TargetModel(
    max_batch=4,
    decode_base_ms=10.0,
    decode_per_seq_ms=2.0,
    prefill_base_ms=4.0,
    prefill_per_token_ms=0.5,
)


def run_to_idle(core: BatchCore, start: float = 0.0, *, check_batch: bool = True) -> float:
    """Runs steps back to back until nothing is left; returns the time the last step ended."""
    now = start
    while core.has_work:
        step = core.begin_step(now)
        if step.batch == 0:
            break
        if check_batch:
            assert core.running <= core.model.max_batch
        now += step.duration_s
        core.end_step(now)
    return now


def submit(core: BatchCore, *, prompt: int = 0, max_tokens: int = 10, at: float = 0.0) -> EngineRequest:
    return core.submit(prompt_tokens=prompt, max_tokens=max_tokens, now=at)


def test_a_lone_request_takes_its_prefill_plus_one_single_sequence_step_per_token() -> None:
    core = BatchCore(MODEL)
    request = submit(core, prompt=10, max_tokens=5)
    run_to_idle(core)
    prefill_s = MODEL.prefill_ms(10) / 1000
    step_s = MODEL.step_ms(1) / 1000
    assert request.first_token_at == pytest.approx(prefill_s + step_s)
    assert request.ended_at == pytest.approx(prefill_s + 5 * step_s)
    assert request.result is Result.COMPLETED
    assert len(request.tokens) == 5


def test_every_sequence_generates_exactly_max_tokens() -> None:
    core = BatchCore(MODEL)
    requests = [submit(core, max_tokens=n) for n in (1, 2, 7, 30, 3, 11)]
    run_to_idle(core)
    assert [len(r.tokens) for r in requests] == [1, 2, 7, 30, 3, 11]
    assert core.stats().generation_tokens_total == 1 + 2 + 7 + 30 + 3 + 11


def test_aggregate_tokens_per_second_rise_with_concurrency_while_each_sequence_slows() -> None:
    model = TargetModel(max_batch=8, decode_base_ms=10.0, decode_per_seq_ms=2.0, prefill_base_ms=0.0)
    aggregate: list[float] = []
    per_sequence: list[float] = []
    for concurrency in (1, 2, 4, 8):
        core = BatchCore(model)
        requests = [submit(core, max_tokens=50) for _ in range(concurrency)]
        end = run_to_idle(core)
        aggregate.append(concurrency * 50 / end)
        first = requests[0]
        assert first.ended_at is not None
        assert first.first_token_at is not None
        per_sequence.append(49 / (first.ended_at - first.first_token_at))
    assert aggregate == sorted(aggregate)
    assert aggregate[-1] == pytest.approx(model.peak_tokens_per_s())
    assert per_sequence == sorted(per_sequence, reverse=True)
    assert per_sequence[0] == pytest.approx(1000 / model.step_ms(1))
    assert per_sequence[-1] == pytest.approx(1000 / model.step_ms(8))


def test_requests_beyond_max_batch_wait_and_are_admitted_in_arrival_order() -> None:
    model = TargetModel(max_batch=2, decode_base_ms=10.0, decode_per_seq_ms=0.0, prefill_base_ms=0.0)
    core = BatchCore(model)
    requests = [submit(core, max_tokens=10, at=0.001 * i) for i in range(5)]
    admitted: list[int] = []
    now = 0.01
    while core.has_work:
        step = core.begin_step(now)
        admitted.extend(r.id for r in step.admitted)
        assert step.batch <= 2
        now += step.duration_s
        core.end_step(now)
    assert admitted == [r.id for r in requests]
    first, third = requests[0], requests[2]
    assert first.ended_at is not None
    assert first.first_token_at is not None
    assert third.first_token_at is not None
    # The third request only gets a slot when one of the first two has finished.
    assert third.first_token_at > first.ended_at
    assert third.first_token_at - third.arrived_at > 5 * (first.first_token_at - first.arrived_at)


def test_prefill_of_a_newly_admitted_sequence_stalls_the_running_ones() -> None:
    core = BatchCore(MODEL)
    running = submit(core, max_tokens=5)
    step = core.begin_step(0.0)
    core.end_step(step.duration_s)
    newcomer = submit(core, prompt=100, max_tokens=5, at=step.duration_s)
    stalled = core.begin_step(step.duration_s)
    assert stalled.admitted == (newcomer,)
    assert stalled.duration_s * 1000 == pytest.approx(MODEL.step_ms(2) + MODEL.prefill_ms(100))
    core.end_step(step.duration_s + stalled.duration_s)
    assert len(running.tokens) == 2
    assert len(newcomer.tokens) == 1


def test_prompt_tokens_are_counted_when_prefilled_and_steps_once_each() -> None:
    core = BatchCore(MODEL)
    submit(core, prompt=7, max_tokens=3)
    submit(core, prompt=5, max_tokens=4)
    assert core.stats().prompt_tokens_total == 0
    run_to_idle(core)
    stats = core.stats()
    assert stats.prompt_tokens_total == 12
    assert stats.steps_total == 4
    assert stats.results[Result.COMPLETED] == 2
    assert (stats.waiting, stats.running) == (0, 0)


def test_unbounded_admission_queues_everything_and_never_drops() -> None:
    core = BatchCore(TargetModel(max_batch=1, admission=Admission.NONE, max_queue=1, max_queue_wait_ms=1.0))
    requests = [submit(core, max_tokens=5) for _ in range(50)]
    assert core.waiting == 50
    run_to_idle(core)
    assert all(r.result is Result.COMPLETED for r in requests)


def test_queue_limit_refuses_once_the_queue_holds_max_queue_requests() -> None:
    model = TargetModel(max_batch=2, admission=Admission.QUEUE_LIMIT, max_queue=3, retry_after_s=1.5)
    core = BatchCore(model)
    accepted = [submit(core) for _ in range(5)]  # two take the free slots, three are queued
    with pytest.raises(QueueFull) as refused:
        submit(core)
    assert refused.value.retry_after_s == 2
    assert refused.value.limit == 3
    assert core.stats().results[Result.REJECTED_429] == 1
    run_to_idle(core)
    assert all(r.result is Result.COMPLETED for r in accepted)


def test_queue_limit_zero_still_accepts_requests_that_have_a_free_slot() -> None:
    core = BatchCore(TargetModel(max_batch=2, admission=Admission.QUEUE_LIMIT, max_queue=0))
    submit(core)
    submit(core)
    with pytest.raises(QueueFull):
        submit(core)


@pytest.mark.parametrize(("setting", "header"), [(0.0, 0), (0.2, 1), (1.0, 1), (1.01, 2), (1.5, 2), (30.0, 30)])
def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one(setting: float, header: int) -> None:
    assert retry_after_header(setting) == header


def test_deadline_drops_a_request_that_has_waited_too_long_when_it_would_be_admitted() -> None:
    model = TargetModel(max_batch=1, admission=Admission.DEADLINE, max_queue_wait_ms=100.0, decode_base_ms=30.0)
    core = BatchCore(model)
    first = submit(core, max_tokens=5)
    late = submit(core, max_tokens=5, at=0.001)
    early = submit(core, max_tokens=5, at=0.12)
    # Steps only, no mid-step expiry: the late request is found expired at the next step boundary.
    now = 0.0
    dropped: list[EngineRequest] = []
    while core.has_work:
        step = core.begin_step(now)
        dropped.extend(step.dropped)
        if step.batch == 0:
            break
        if now == 0.0:
            assert core.next_deadline() == pytest.approx(0.101)
        now += step.duration_s
        core.end_step(now)
    assert dropped == [late]
    assert late.result is Result.DROPPED_DEADLINE_503
    assert late.tokens == []
    assert first.result is Result.COMPLETED
    # Admitted at about 0.17 s after arriving at 0.12 s: within its 100 ms.
    assert early.result is Result.COMPLETED
    assert core.stats().results[Result.DROPPED_DEADLINE_503] == 1


def test_expire_drops_exactly_the_requests_whose_queue_time_has_run_out() -> None:
    core = BatchCore(TargetModel(max_batch=1, admission=Admission.DEADLINE, max_queue_wait_ms=50.0))
    running = submit(core)
    core.begin_step(0.0)
    queued = [submit(core, at=0.01 * i) for i in range(1, 6)]
    assert core.expire(0.059) == []
    assert core.expire(0.071) == queued[:2]
    assert core.next_deadline() == pytest.approx(0.08)
    assert running.state is SeqState.RUNNING
    assert core.waiting == 3


@given(
    arrived=st.floats(min_value=0.0, max_value=1e7, allow_nan=False),
    wait_ms=st.floats(min_value=0.001, max_value=3_600_000.0, allow_nan=False),
)
def test_the_oldest_request_expires_exactly_at_the_deadline_the_core_reports(arrived: float, wait_ms: float) -> None:
    # An engine wakes at next_deadline() to expire; if rounding kept the request alive it would spin.
    core = BatchCore(TargetModel(max_batch=1, admission=Admission.DEADLINE, max_queue_wait_ms=wait_ms))
    submit(core, at=arrived)
    core.begin_step(arrived)
    waiting = submit(core, at=arrived)
    deadline = core.next_deadline()
    assert deadline is not None
    assert core.expire(deadline) == [waiting]


def test_a_cancelled_waiting_request_is_never_admitted_and_costs_no_steps() -> None:
    core = BatchCore(TargetModel(max_batch=1))
    kept = submit(core, max_tokens=4)
    gone = [submit(core, max_tokens=100) for _ in range(3)]
    last = submit(core, max_tokens=4)
    for request in gone:
        assert core.cancel(request, 0.0)
    run_to_idle(core)
    stats = core.stats()
    assert stats.steps_total == 8
    assert stats.generation_tokens_total == 8
    assert stats.results[Result.ABORTED_DISCONNECT] == 3
    assert all(r.admitted_at is None and r.tokens == [] for r in gone)
    assert kept.result is Result.COMPLETED
    assert last.result is Result.COMPLETED


def test_cancelling_a_running_sequence_frees_its_slot_and_keeps_its_tokens_counted() -> None:
    core = BatchCore(TargetModel(max_batch=1, decode_base_ms=10.0, prefill_base_ms=0.0))
    running = submit(core, max_tokens=100)
    waiting = submit(core, max_tokens=2)
    now = 0.0
    for _ in range(3):
        step = core.begin_step(now)
        now += step.duration_s
        core.end_step(now)
    assert core.cancel(running, now)
    assert running.result is Result.ABORTED_DISCONNECT
    run_to_idle(core, now)
    stats = core.stats()
    assert stats.generation_tokens_total == 3 + 2
    assert waiting.result is Result.COMPLETED


def test_a_sequence_cancelled_mid_step_still_gets_that_steps_token_and_frees_its_slot_after() -> None:
    core = BatchCore(TargetModel(max_batch=1, decode_base_ms=10.0, prefill_base_ms=0.0))
    running = submit(core, max_tokens=100)
    waiting = submit(core, max_tokens=1)
    step = core.begin_step(0.0)
    assert core.cancel(running, 0.005)
    assert core.end_step(step.duration_s) == []
    assert len(running.tokens) == 1
    assert core.stats().generation_tokens_total == 1
    assert core.begin_step(step.duration_s).admitted == (waiting,)


def test_cancel_after_completion_changes_nothing() -> None:
    core = BatchCore(MODEL)
    request = submit(core, max_tokens=2)
    run_to_idle(core)
    assert not core.cancel(request, 1.0)
    assert request.result is Result.COMPLETED
    assert core.stats().results[Result.ABORTED_DISCONNECT] == 0


def test_token_text_depends_only_on_the_seed_and_the_request_order() -> None:
    def texts(model: TargetModel) -> list[str]:
        core = BatchCore(model)
        requests = [submit(core, max_tokens=12) for _ in range(6)]
        run_to_idle(core)
        return [r.text for r in requests]

    batched = texts(TargetModel(seed=7, max_batch=8))
    assert texts(TargetModel(seed=7, max_batch=1, decode_base_ms=3.0)) == batched
    assert texts(TargetModel(seed=8, max_batch=8)) != batched
    assert len(set(batched)) == 6
    assert all(word + " " in VOCABULARY for text in batched for word in text.split())


def test_step_jitter_varies_durations_within_its_bounds_reproducibly() -> None:
    model = TargetModel(max_batch=1, step_jitter=0.2, prefill_base_ms=0.0, decode_per_seq_ms=0.0, seed=3)

    def durations() -> list[float]:
        core = BatchCore(model)
        submit(core, max_tokens=200)
        out = []
        now = 0.0
        while core.has_work:
            step = core.begin_step(now)
            out.append(step.duration_s * 1000)
            now += step.duration_s
            core.end_step(now)
        return out

    first = durations()
    nominal = model.decode_base_ms
    assert all(0.8 * nominal <= d <= 1.2 * nominal for d in first)
    assert max(first) - min(first) > 0.2 * nominal
    assert durations() == first


def test_steps_must_alternate_begin_and_end() -> None:
    core = BatchCore(MODEL)
    with pytest.raises(RuntimeError):
        core.end_step(0.0)
    submit(core)
    core.begin_step(0.0)
    with pytest.raises(RuntimeError):
        core.begin_step(0.0)


def test_abort_all_ends_queued_and_running_sequences_as_shutdown() -> None:
    core = BatchCore(TargetModel(max_batch=1))
    requests = [submit(core) for _ in range(3)]
    core.begin_step(0.0)
    ended = core.abort_all(0.5)
    assert set(ended) == set(requests)
    assert all(r.result is Result.ABORTED_SHUTDOWN and r.ended_at == 0.5 for r in requests)
    assert not core.has_work


def test_bad_requests_are_counted_without_touching_the_queue() -> None:
    core = BatchCore(MODEL)
    core.record_bad_request()
    core.record_bad_request()
    stats = core.stats()
    assert stats.results[Result.BAD_REQUEST] == 2
    assert stats.waiting == 0


# --- interrupt_when_full: llama-cpp-python's interrupt_requests ---------------------------------------------


def test_a_request_waiting_for_a_full_batch_interrupts_the_oldest_stream() -> None:
    """With every slot busy, a newcomer ends the oldest running stream (tokens kept, no completion) and takes
    its slot at once; without a waiting request nothing is interrupted."""
    core = BatchCore(TargetModel(max_batch=2, decode_base_ms=10.0, interrupt_when_full=True))
    first, second = submit(core), submit(core)
    now = 0.0
    for _ in range(3):
        step = core.begin_step(now)
        assert step.interrupted == ()
        now += step.duration_s
        core.end_step(now)
    third = submit(core, at=now)
    step = core.begin_step(now)
    assert step.interrupted == (first,)
    assert step.admitted == (third,)
    assert (first.state, first.result, len(first.tokens)) == (SeqState.ENDED, Result.INTERRUPTED, 3)
    assert second.state is SeqState.RUNNING
    assert core.stats().results[Result.INTERRUPTED] == 1


def test_non_streamed_requests_are_not_interrupted() -> None:
    """As in llama-cpp-python, where the interrupt lives in the stream publisher: a whole answer waits."""
    core = BatchCore(TargetModel(max_batch=1, decode_base_ms=10.0, interrupt_when_full=True))
    whole = core.submit(prompt_tokens=0, max_tokens=3, now=0.0, streaming=False)
    step = core.begin_step(0.0)
    core.end_step(step.duration_s)
    waiting = submit(core, at=step.duration_s)
    assert core.begin_step(step.duration_s).interrupted == ()
    assert whole.state is SeqState.RUNNING
    assert waiting.state is SeqState.WAITING


def test_without_the_mode_a_full_batch_only_queues() -> None:
    core = BatchCore(TargetModel(max_batch=1, decode_base_ms=10.0))
    running = submit(core)
    core.end_step(core.begin_step(0.0).duration_s)
    submit(core, at=0.01)
    assert core.begin_step(0.01).interrupted == ()
    assert running.state is SeqState.RUNNING


def test_queue_time_counts_each_admitted_requests_wait_for_a_slot() -> None:
    model = TargetModel(max_batch=1, decode_base_ms=10.0, decode_per_seq_ms=0.0, prefill_base_ms=0.0)
    core = BatchCore(model)
    first, second = submit(core, max_tokens=2, at=0.0), submit(core, max_tokens=2, at=0.005)
    run_to_idle(core)
    stats = core.stats()
    assert stats.queue_time_count == 2
    # the first starts at once; the second waits for the first's two 10-ms steps, from 5 ms in
    assert second.admitted_at == pytest.approx(0.02)
    assert first.admitted_at == pytest.approx(0.0)
    assert stats.queue_time_seconds_sum == pytest.approx(0.015)


def admission_order(model: TargetModel, arrivals: list[tuple[int, str]]) -> list[int]:
    """The ids in the order a one-slot engine admits them, every request waiting from the start."""
    core = BatchCore(model)
    blocker = core.submit(prompt_tokens=0, max_tokens=1, now=0.0)
    requests = [core.submit(prompt_tokens=0, max_tokens=1, now=0.001 * (i + 1), priority=priority, tenant=tenant)
                for i, (priority, tenant) in enumerate(arrivals)]  # fmt: skip
    order: list[int] = []
    now = 0.01
    while core.has_work:
        step = core.begin_step(now)
        order.extend(r.id for r in step.admitted if r is not blocker)
        now += step.duration_s
        core.end_step(now)
    assert len(order) == len(requests)
    return [next(i for i, r in enumerate(requests) if r.id == rid) for rid in order]


def test_fifo_admits_in_arrival_order_whatever_the_priority_or_tenant() -> None:
    model = TargetModel(max_batch=1, decode_base_ms=10.0, prefill_base_ms=0.0)
    assert admission_order(model, [(5, "a"), (0, "b"), (1, "a")]) == [0, 1, 2]


def test_priority_admits_the_lowest_priority_value_first_and_arrival_order_among_equals() -> None:
    model = TargetModel(max_batch=1, decode_base_ms=10.0, prefill_base_ms=0.0, scheduling=Scheduling.PRIORITY)
    assert admission_order(model, [(5, ""), (0, ""), (5, ""), (-1, ""), (0, "")]) == [3, 1, 4, 0, 2]


def test_fair_scheduling_takes_the_tenants_in_turn_so_a_burst_queues_behind_itself() -> None:
    model = TargetModel(max_batch=1, decode_base_ms=10.0, prefill_base_ms=0.0, scheduling=Scheduling.FAIR)
    burst = [(0, "batch")] * 5
    order = admission_order(model, [*burst, (0, "chat"), (0, "chat")])
    assert order == [0, 5, 1, 6, 2, 3, 4]  # the chat requests do not wait for the whole burst


def test_a_waiting_request_leaves_any_queue_order_and_the_deadline_still_drops_the_oldest_first() -> None:
    model = TargetModel(max_batch=1, admission=Admission.DEADLINE, max_queue_wait_ms=50.0,
                        scheduling=Scheduling.PRIORITY)  # fmt: skip
    core = BatchCore(model)
    submit(core, at=0.0)  # takes the slot at the first step
    core.begin_step(0.0)
    late = core.submit(prompt_tokens=0, max_tokens=1, now=0.01, priority=9)
    early = core.submit(prompt_tokens=0, max_tokens=1, now=0.02, priority=0)
    gone = core.submit(prompt_tokens=0, max_tokens=1, now=0.03, priority=0)
    assert core.cancel(gone, 0.031)
    assert core.expire(0.061) == [late]  # the oldest by arrival, whatever its priority
    assert core.waiting == 1
    assert early.state is SeqState.WAITING
