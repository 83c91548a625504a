"""Parameters of the built-in simulated LLM target, and the throughput they imply.

The simulator behaves like a continuous-batching inference engine: a FIFO waiting queue; up to
``max_batch`` sequences decoded together, one token each per step; a step takes
``decode_base_ms + decode_per_seq_ms × batch`` plus the prefill of every sequence admitted in it
(``prefill_base_ms + prefill_per_token_ms × prompt_tokens``). Aggregate tokens/s therefore rises with
batch size while each sequence slows down, which is what makes the cliff.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from cliffwatch.domain.errors import TargetConfigInvalid
from cliffwatch.domain.validation import Problems, Reader


class Admission(StrEnum):
    NONE = "none"  # unbounded queue: requests wait, and time out at the client
    QUEUE_LIMIT = "queue_limit"  # 429 with Retry-After when the waiting queue is full
    DEADLINE = "deadline"  # 503 for requests that waited longer than max_queue_wait_ms


class Scheduling(StrEnum):
    """The order waiting requests are admitted in (``simulator/waiting.py``)."""

    FIFO = "fifo"  # arrival order (vLLM's default fcfs)
    PRIORITY = "priority"  # the lowest "priority" first (vLLM's --scheduling-policy priority)
    FAIR = "fair"  # tenants (the body's "user") in turn


@dataclass(frozen=True, kw_only=True)
class TargetModel:
    model: str = "sim-llm"
    max_batch: int = 16
    prefill_base_ms: float = 4.0
    prefill_per_token_ms: float = 0.02
    decode_base_ms: float = 20.0
    decode_per_seq_ms: float = 1.5
    admission: Admission = Admission.NONE
    max_queue: int = 64
    retry_after_s: float = 1.0
    max_queue_wait_ms: float = 2_000.0
    step_jitter: float = 0.0
    # A request waiting for a full batch ends the oldest running stream early: the stream gets [DONE] with no
    # finish_reason, and its slot goes to the newcomer. llama-cpp-python's server does this by default (its
    # ``interrupt_requests`` setting: ``get_event_publisher`` in llama_cpp/server/app.py sends [DONE] and stops
    # when another request waits for the model's lock). Non-streamed requests are not interrupted, as there.
    interrupt_when_full: bool = False
    scheduling: Scheduling = Scheduling.FIFO
    # Automatic prefix caching, on by default as in vLLM V1: the prefill of a prompt's leading blocks already
    # cached is skipped (simulator/prefix_cache.py). The KV cache holds ``kv_cache_tokens``; its usage is the
    # running sequences' tokens over that, and cached blocks beyond it are evicted, least recently used first.
    prefix_caching: bool = True
    kv_cache_tokens: int = 262_144
    block_tokens: int = 16
    max_prompt_tokens: int = 32_768
    default_max_tokens: int = 256
    seed: int = 0

    def step_ms(self, batch: int) -> float:
        """Decode step time with ``batch`` running sequences, before any prefill."""
        return self.decode_base_ms + self.decode_per_seq_ms * batch

    def prefill_ms(self, prompt_tokens: int) -> float:
        return self.prefill_base_ms + self.prefill_per_token_ms * prompt_tokens

    def peak_tokens_per_s(self) -> float:
        """Output tokens/s with a full batch and no prefill: the ceiling of the token throughput chart."""
        return self.max_batch * 1000.0 / self.step_ms(self.max_batch)

    def saturation_rps(self, prompt_tokens: float, output_tokens: float) -> float:
        """Requests/s the engine completes when always full (throughput ceiling, not SLO-bound capacity).

        Each second holds ``steps × step_ms(B) + λ × prefill_ms(P)`` ms of work, with ``steps × B = λ × L``
        (every request needs L decode steps in a batch of B), so λ = 1000 / (L·step(B)/B + prefill(P)).
        """
        per_request_ms = output_tokens * self.step_ms(self.max_batch) / self.max_batch
        return 1000.0 / (per_request_ms + self.prefill_ms(round(prompt_tokens)))

    def lone_request_ms(self, prompt_tokens: float, output_tokens: float) -> float:
        """End-to-end time of a request that has the engine to itself: its prefill plus L steps of batch 1."""
        return self.prefill_ms(round(prompt_tokens)) + output_tokens * self.step_ms(1)

    def _work_per_request_ms(self, prompt_tokens: float, output_tokens: float) -> float:
        # k: the engine time a request adds beyond the base of the steps it rides in (docs/capacity-model.md)
        return self.prefill_ms(round(prompt_tokens)) + self.decode_per_seq_ms * output_tokens

    def _busy_step_ms(self, rate: float, prompt_tokens: float, output_tokens: float) -> float:
        # τ = d₀ / (1 − λ·k/1000): exact for the mean step of an engine that never idles.
        rate = min(rate, self.saturation_rps(prompt_tokens, output_tokens))
        return self.decode_base_ms / (1.0 - rate * self._work_per_request_ms(prompt_tokens, output_tokens) / 1000.0)

    def mean_step_ms(self, rate: float, prompt_tokens: float, output_tokens: float) -> float:
        """Mean duration of the steps the engine runs at a steady ``rate`` req/s (docs/capacity-model.md).

        While the engine never idles, every second is spent on steps: ``1000 = (1000/τ)·d₀ + λ·L·d₁ + λ·prefill(P)``
        (each request is decoded in L steps and prefilled once), so ``τ = d₀ / (1 − λ·k/1000)`` with
        ``k = prefill(P) + d₁·L``. At low rates the engine idles between requests and each step holds one
        sequence: ``τ = step(1) + prefill(P)/L``; the larger of the two is the mean. Beyond saturation the
        batch stays full and the step time stays at its saturation value.
        """
        lone = self.step_ms(1) + self.prefill_ms(round(prompt_tokens)) / output_tokens
        return max(lone, self._busy_step_ms(rate, prompt_tokens, output_tokens))

    def mean_batch(self, rate: float, prompt_tokens: float, output_tokens: float) -> float:
        """Mean number of sequences in the steps the engine runs at ``rate`` req/s: ``λ·L·τ/1000`` (each
        request is in L steps), at least 1 (an idle engine runs no steps), at most ``max_batch``."""
        if rate <= 0:
            return 0.0
        rate = min(rate, self.saturation_rps(prompt_tokens, output_tokens))
        batch = rate * output_tokens * self._busy_step_ms(rate, prompt_tokens, output_tokens) / 1000.0
        return min(float(self.max_batch), max(1.0, batch))

    def e2e_ms(self, rate: float, prompt_tokens: float, output_tokens: float) -> float:
        """Modelled mean end-to-end latency at a steady (constant) ``rate``; infinite above saturation,
        where the waiting queue grows for as long as the load lasts.

        A request waits for the step in progress to end (half a step on average), then rides L steps; and
        it never finishes faster than it would alone (``lone_request_ms``), which is what low rates give.
        """
        return self._e2e_ms(rate, prompt_tokens, output_tokens, wait_steps=0.5)

    def e2e_tail_ms(self, rate: float, prompt_tokens: float, output_tokens: float) -> float:
        """Modelled tail (≈ p99) end-to-end latency at a steady constant ``rate``: a request that arrives
        just as a step begins waits all of it, so ``(L + 1)·τ``; infinite above saturation."""
        return self._e2e_ms(rate, prompt_tokens, output_tokens, wait_steps=1.0)

    def _e2e_ms(self, rate: float, prompt_tokens: float, output_tokens: float, *, wait_steps: float) -> float:
        if rate > self.saturation_rps(prompt_tokens, output_tokens):
            return math.inf
        busy_ms = (output_tokens + wait_steps) * self._busy_step_ms(rate, prompt_tokens, output_tokens)
        return max(self.lone_request_ms(prompt_tokens, output_tokens), busy_ms)

    def usable_rps(self, prompt_tokens: float, output_tokens: float, e2e_slo_ms: float) -> float:
        """The highest steady constant rate whose tail e2e latency (``e2e_tail_ms``) stays within
        ``e2e_slo_ms``, i.e. where nearly every request is on time: the rate where the tail reaches the
        SLO, or the saturation rate when that comes first.

        0 when a request alone cannot meet the SLO, or when the SLO leaves less than a step of slack over
        the unloaded ``(L + 1)·d₀`` (then whether a request is on time depends on when it arrives within a
        step, not on the rate). Poisson arrivals reach the cliff earlier (docs/capacity-model.md).
        """
        if self.lone_request_ms(prompt_tokens, output_tokens) > e2e_slo_ms:
            return 0.0
        unloaded_ms = (output_tokens + 1.0) * self.decode_base_ms
        if unloaded_ms >= e2e_slo_ms:
            return 0.0
        saturation = self.saturation_rps(prompt_tokens, output_tokens)
        work_ms = self._work_per_request_ms(prompt_tokens, output_tokens)
        if work_ms <= 0:
            return saturation  # steps that take as long at any batch size: only the batch limit binds
        # (L + 1)·d₀ / (1 − λ·k/1000) = SLO, solved for λ
        return min(1000.0 * (1.0 - unloaded_ms / e2e_slo_ms) / work_ms, saturation)

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name: (getattr(self, f.name).value if f.name in ("admission", "scheduling") else getattr(self, f.name))
            for f in fields(self)
        }


def parse_target_model(value: object, path: str, problems: Problems) -> TargetModel | None:
    """A target model from a mapping of overrides; every field is optional and defaults as above."""
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    base = TargetModel()
    values: dict[str, Any] = {
        "model": reader.string("model", base.model),
        "max_batch": reader.number("max_batch", base.max_batch, ge=1, le=4096, integer=True),
        "prefill_base_ms": reader.number("prefill_base_ms", base.prefill_base_ms, ge=0, le=60_000),
        "prefill_per_token_ms": reader.number("prefill_per_token_ms", base.prefill_per_token_ms, ge=0, le=1_000),
        "decode_base_ms": reader.number("decode_base_ms", base.decode_base_ms, gt=0, le=60_000),
        "decode_per_seq_ms": reader.number("decode_per_seq_ms", base.decode_per_seq_ms, ge=0, le=60_000),
        "admission": reader.string("admission", base.admission.value, choices=tuple(a.value for a in Admission)),
        "max_queue": reader.number("max_queue", base.max_queue, ge=0, le=1_000_000, integer=True),
        "retry_after_s": reader.number("retry_after_s", base.retry_after_s, ge=0, le=3_600),
        "max_queue_wait_ms": reader.number("max_queue_wait_ms", base.max_queue_wait_ms, gt=0, le=3_600_000),
        "step_jitter": reader.number("step_jitter", base.step_jitter, ge=0, le=0.9),
        "interrupt_when_full": reader.boolean("interrupt_when_full", base.interrupt_when_full),
        "scheduling": reader.string("scheduling", base.scheduling.value, choices=tuple(s.value for s in Scheduling)),
        "prefix_caching": reader.boolean("prefix_caching", base.prefix_caching),
        "kv_cache_tokens": reader.number("kv_cache_tokens", base.kv_cache_tokens, ge=1, le=1 << 30, integer=True),
        "block_tokens": reader.number("block_tokens", base.block_tokens, ge=1, le=1024, integer=True),
        "max_prompt_tokens": reader.number("max_prompt_tokens", base.max_prompt_tokens, ge=1, integer=True),
        "default_max_tokens": reader.number("default_max_tokens", base.default_max_tokens, ge=1, integer=True),
        "seed": reader.number("seed", base.seed, ge=0, integer=True),
    }
    reader.done()
    if any(v is None for v in values.values()):
        return None
    values["admission"] = Admission(values["admission"])
    values["scheduling"] = Scheduling(values["scheduling"])
    return TargetModel(**values)


def target_model_from(overrides: Mapping[str, Any]) -> TargetModel:
    """A target model from overrides, raising ``TargetConfigInvalid`` listing every bad field."""
    problems = Problems()
    model = parse_target_model(dict(overrides), "", problems)
    if problems or model is None:
        raise TargetConfigInvalid(problems.items)
    return model
