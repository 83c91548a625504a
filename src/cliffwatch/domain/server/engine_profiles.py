"""Engine profiles: for each inference server cliffwatch knows, the metric that carries each signal.

Every name is the exact wire name in the Prometheus text format, checked against the engine's own source
(the citations are per profile below, and in docs/server-metrics.md with the versions read). A signal may
have several candidates, newest first: the first one whose samples the page carries is used for the run.
Where an engine does not expose a signal, the profile simply has none for it, and a scenario can add its
own (``target.metrics.series``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType

from cliffwatch.domain.scenario.metrics_spec import SIGNAL_UNITS, EngineKind, Signal


@dataclass(frozen=True, kw_only=True)
class SignalDef:
    signal: Signal
    candidates: tuple[str, ...]  # expressions (``metric_expr``), the first present on the page wins
    source: str  # where the metric is defined, for the docs and for whoever checks the name next

    @property
    def unit(self) -> str:
        return SIGNAL_UNITS[self.signal]


def _def(signal: Signal, *candidates: str, source: str) -> SignalDef:
    return SignalDef(signal=signal, candidates=candidates, source=source)


# vLLM V1: vllm/v1/metrics/loggers.py, PrometheusStatLogger (read at v0.33.0). Every series carries
# model_name and engine (one per data-parallel engine): counts are summed, the KV cache is the fullest
# engine's. kv_cache_usage_perc is a fraction despite its name; before 0.9.2 it was gpu_cache_usage_perc
# (removed in 0.12, vllm PR #29330).
_VLLM = "vllm/v1/metrics/loggers.py (PrometheusStatLogger)"
VLLM = (
    _def(Signal.WAITING, "vllm:num_requests_waiting", source=_VLLM),
    _def(Signal.RUNNING, "vllm:num_requests_running", source=_VLLM),
    _def(Signal.KV_CACHE, "max(vllm:kv_cache_usage_perc)", "max(vllm:gpu_cache_usage_perc)", source=_VLLM),
    _def(Signal.PREEMPTIONS, "rate(vllm:num_preemptions_total)", source=_VLLM),
    _def(Signal.GENERATION_TOKENS, "rate(vllm:generation_tokens_total)", source=_VLLM),
    _def(Signal.PROMPT_TOKENS, "rate(vllm:prompt_tokens_total)", source=_VLLM),
    _def(Signal.QUEUE_TIME, "mean(vllm:request_queue_time_seconds)", source=_VLLM),
    _def(Signal.PREFIX_HITS, "rate(vllm:prefix_cache_hits_total)", source=_VLLM),
    _def(Signal.PREFIX_QUERIES, "rate(vllm:prefix_cache_queries_total)", source=_VLLM),
)

# SGLang: python/sglang/srt/observability/metrics_collector.py (SchedulerMetricsCollector,
# TokenizerMetricsCollector; read at 0.5.23; python/sglang/srt/metrics/collector.py before). Metrics need
# --enable-metrics. With priority scheduling the total is the series with priority="" and each priority has
# one of its own, so only the total is read. "Retraction" is SGLang's word for preemption. Its token
# counters grow once per finished request, not per step.
_SGLANG = "python/sglang/srt/observability/metrics_collector.py"
SGLANG = (
    _def(Signal.WAITING, 'sglang:num_queue_reqs{priority=""}', source=_SGLANG),
    _def(Signal.RUNNING, 'sglang:num_running_reqs{priority=""}', source=_SGLANG),
    _def(Signal.KV_CACHE, "max(sglang:token_usage)", source=_SGLANG),
    _def(Signal.PREEMPTIONS, "rate(sglang:num_retracted_requests_total)", source=_SGLANG),
    _def(Signal.GENERATION_TOKENS, "rate(sglang:generation_tokens_total)", source=_SGLANG),
    _def(Signal.PROMPT_TOKENS, "rate(sglang:prompt_tokens_total)", source=_SGLANG),
    _def(Signal.QUEUE_TIME, "mean(sglang:queue_time_seconds)", source=_SGLANG),
)

# Hugging Face TGI: router/src/server.rs (histograms), backends/v3/src/queue.rs (tgi_queue_size),
# backends/v3/src/backend.rs (tgi_batch_current_size); rendered by metrics-exporter-prometheus 0.15, so
# counters carry no _total. No KV-cache or preemption metric; tokens only as histograms of whole requests.
_TGI = "router/src/server.rs, backends/v3/src/queue.rs and backend.rs"
TGI = (
    _def(Signal.WAITING, "tgi_queue_size", source=_TGI),
    _def(Signal.RUNNING, "tgi_batch_current_size", source=_TGI),
    _def(Signal.GENERATION_TOKENS, "rate(tgi_request_generated_tokens_sum)", source=_TGI),
    _def(Signal.PROMPT_TOKENS, "rate(tgi_request_input_length_sum)", source=_TGI),
    _def(Signal.QUEUE_TIME, "mean(tgi_request_queue_duration)", source=_TGI),
)

# llama.cpp's llama-server: tools/server/server-context.cpp (get_metrics; server.cpp's handle_metrics
# before), served only with --metrics. requests_deferred are the requests waiting for a free slot;
# kv_cache_usage_ratio was removed upstream in May 2025 (PR #13660) but older builds and forks have it.
_LLAMACPP = "tools/server/server-context.cpp (get_metrics)"
LLAMACPP = (
    _def(Signal.WAITING, "llamacpp:requests_deferred", source=_LLAMACPP),
    _def(Signal.RUNNING, "llamacpp:requests_processing", source=_LLAMACPP),
    _def(Signal.KV_CACHE, "llamacpp:kv_cache_usage_ratio", source=_LLAMACPP),
    _def(Signal.GENERATION_TOKENS, "rate(llamacpp:tokens_predicted_total)", source=_LLAMACPP),
    _def(Signal.PROMPT_TOKENS, "rate(llamacpp:prompt_tokens_total)", source=_LLAMACPP),
)

# NVIDIA Triton: core src/metrics.cc (nv_inference_*, prometheus-cpp: counters without _total) and the
# TensorRT-LLM backend's custom_metrics_reporter.cc (nv_trt_llm_*, nv_llm_*). The in-flight batcher's
# queue and batch are preferred; without that backend only the core's pending count is there.
_TRITON = "core src/metrics.cc; TensorRT-LLM triton_backend custom_metrics_reporter.cc"
TRITON = (
    _def(Signal.WAITING, 'nv_trt_llm_request_metrics{request_type="waiting"}',
         "nv_inference_pending_request_count", source=_TRITON),
    _def(Signal.RUNNING, 'nv_trt_llm_request_metrics{request_type="active"}', source=_TRITON),
    _def(Signal.KV_CACHE, 'max(nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"})', source=_TRITON),
    _def(Signal.GENERATION_TOKENS, "rate(nv_llm_output_token_len_sum)", source=_TRITON),
    _def(Signal.PROMPT_TOKENS, "rate(nv_llm_input_token_len_sum)", source=_TRITON),
    _def(Signal.QUEUE_TIME, "mean(nv_inference_queue_summary_us) / 1000000", source=_TRITON),
)  # fmt: skip

# cliffwatch's own simulated target: simulator/prometheus.py.
_BUILTIN = "src/cliffwatch/simulator/prometheus.py"
BUILTIN = (
    _def(Signal.WAITING, "cliffwatch_target_waiting_requests", source=_BUILTIN),
    _def(Signal.RUNNING, "cliffwatch_target_running_requests", source=_BUILTIN),
    _def(Signal.PREEMPTIONS, "rate(cliffwatch_target_preemptions_total)", source=_BUILTIN),
    _def(Signal.GENERATION_TOKENS, "rate(cliffwatch_target_generation_tokens_total)", source=_BUILTIN),
    _def(Signal.PROMPT_TOKENS, "rate(cliffwatch_target_prompt_tokens_total)", source=_BUILTIN),
    _def(Signal.QUEUE_TIME, "mean(cliffwatch_target_queue_time_seconds)", source=_BUILTIN),
    _def(Signal.KV_CACHE, "cliffwatch_target_kv_cache_usage_ratio", source=_BUILTIN),
    _def(Signal.PREFIX_HITS, "rate(cliffwatch_target_prefix_cache_hits_total)", source=_BUILTIN),
    _def(Signal.PREFIX_QUERIES, "rate(cliffwatch_target_prefix_cache_queries_total)", source=_BUILTIN),
)

PROFILES = MappingProxyType(
    {EngineKind.VLLM: VLLM, EngineKind.SGLANG: SGLANG, EngineKind.TGI: TGI, EngineKind.LLAMACPP: LLAMACPP,
     EngineKind.TRITON: TRITON, EngineKind.BUILTIN: BUILTIN}
)  # fmt: skip

# How a page tells its engine, checked in this order: Triton's vLLM backend re-exports vllm: metrics beside
# its own nv_ ones, so nv_ is looked for first.
_PREFIXES = (
    (("nv_inference_", "nv_trt_llm_"), EngineKind.TRITON),
    (("vllm:",), EngineKind.VLLM),
    (("sglang:",), EngineKind.SGLANG),
    (("tgi_",), EngineKind.TGI),
    (("llamacpp:",), EngineKind.LLAMACPP),
    (("cliffwatch_target_",), EngineKind.BUILTIN),
)


def detect_engine(sample_names: Iterable[str]) -> EngineKind | None:
    """The engine whose metric names the page carries, or None when it names none cliffwatch knows."""
    names = tuple(sample_names)
    for prefixes, engine in _PREFIXES:
        if any(name.startswith(prefixes) for name in names):
            return engine
    return None
