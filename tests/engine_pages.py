"""Prometheus pages as each inference engine renders them, with the numbers a test chooses.

Each page mimics its engine's real exposition: the metric names, labels, types and suffix conventions read
from the engine's own source (the citations are in src/cliffwatch/domain/server/engine_profiles.py and
docs/server-metrics.md), including the quirks a scraper must survive:

- vLLM (vllm/v1/metrics/loggers.py, prometheus_client): model_name and engine labels, ``_created`` gauges
  beside each counter, two data-parallel engines whose counts add up;
- SGLang (observability/metrics_collector.py, multiprocess mode): the total under ``priority=""`` and one
  series per priority beside it, a ``pid`` label, HELP texts replaced by "Multiprocess metric";
- TGI (metrics-exporter-prometheus 0.15): counters without ``_total``, tokens only as histograms;
- llama.cpp (server-context.cpp): no labels, counters printed at six significant digits (``1.36238e+06``);
- Triton (core metrics.cc via prometheus-cpp, TensorRT-LLM's custom metrics): counters without ``_total``,
  the in-flight batcher's families with a category label;
- the built-in target (cliffwatch/simulator/prometheus.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class EngineState:
    waiting: int = 0
    running: int = 0
    kv: float = 0.0  # fraction in use
    preempted: int = 0  # counter
    generated: int = 0  # output tokens, counter
    prompted: int = 0  # prompt tokens, counter
    queue_sum_s: float = 0.0  # seconds waited by requests admitted so far
    queue_count: int = 0
    cache_queries: int = 0  # prompt tokens looked up in the prefix cache, counter
    cache_hits: int = 0  # of those, found, counter


def six_digits(value: float) -> str:
    """A number as C++'s ``std::stringstream << double`` writes it at its default precision (llama.cpp)."""
    return f"{value:.6g}"


def vllm(s: EngineState) -> str:
    model = 'engine="{e}",model_name="m"'
    half_w, half_r = s.waiting // 2, s.running // 2
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{model.format(e=0)}}} {float(half_r)}",
        f"vllm:num_requests_running{{{model.format(e=1)}}} {float(s.running - half_r)}",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{model.format(e=0)}}} {float(half_w)}",
        f"vllm:num_requests_waiting{{{model.format(e=1)}}} {float(s.waiting - half_w)}",
        "# HELP vllm:kv_cache_usage_perc KV-Cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{model.format(e=0)}}} {s.kv / 2}",
        f"vllm:kv_cache_usage_perc{{{model.format(e=1)}}} {s.kv}",
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total{{{model.format(e=0)}}} {float(s.preempted)}",
        "# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_created gauge",
        f"vllm:num_preemptions_created{{{model.format(e=0)}}} 1.7648e+09",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{model.format(e=0)}}} {float(s.generated)}",
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{model.format(e=0)}}} {float(s.prompted)}",
        "# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.",
        "# TYPE vllm:request_queue_time_seconds histogram",
        f'vllm:request_queue_time_seconds_bucket{{{model.format(e=0)},le="0.3"}} {float(s.queue_count)}',
        f'vllm:request_queue_time_seconds_bucket{{{model.format(e=0)},le="+Inf"}} {float(s.queue_count)}',
        f"vllm:request_queue_time_seconds_count{{{model.format(e=0)}}} {float(s.queue_count)}",
        f"vllm:request_queue_time_seconds_sum{{{model.format(e=0)}}} {s.queue_sum_s}",
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{model.format(e=0)}}} {float(s.cache_queries)}",
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{{{model.format(e=0)}}} {float(s.cache_hits)}",
    ]
    return "\n".join(lines) + "\n"


def sglang(s: EngineState) -> str:
    base = 'engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    front = 'engine_type="unified",is_streaming="true",model_name="m"'  # the tokenizer side's labels
    lines = [
        "# HELP sglang:num_queue_reqs Multiprocess metric",
        "# TYPE sglang:num_queue_reqs gauge",
        f'sglang:num_queue_reqs{{{base},priority=""}} {float(s.waiting)}',
        f'sglang:num_queue_reqs{{{base},priority="0"}} {float(s.waiting)}',
        "# HELP sglang:num_running_reqs Multiprocess metric",
        "# TYPE sglang:num_running_reqs gauge",
        f'sglang:num_running_reqs{{{base},priority=""}} {float(s.running)}',
        "# HELP sglang:token_usage Multiprocess metric",
        "# TYPE sglang:token_usage gauge",
        f"sglang:token_usage{{{base}}} {s.kv}",
        "# HELP sglang:num_retracted_requests_total Multiprocess metric",
        "# TYPE sglang:num_retracted_requests_total counter",
        f'sglang:num_retracted_requests_total{{{base},pid="412"}} {float(s.preempted)}',
        "# HELP sglang:generation_tokens_total Multiprocess metric",
        "# TYPE sglang:generation_tokens_total counter",
        f"sglang:generation_tokens_total{{{front}}} {float(s.generated)}",
        "# HELP sglang:prompt_tokens_total Multiprocess metric",
        "# TYPE sglang:prompt_tokens_total counter",
        f"sglang:prompt_tokens_total{{{front}}} {float(s.prompted)}",
        "# HELP sglang:queue_time_seconds Multiprocess metric",
        "# TYPE sglang:queue_time_seconds histogram",
        f'sglang:queue_time_seconds_bucket{{{base},le="+Inf"}} {float(s.queue_count)}',
        f"sglang:queue_time_seconds_count{{{base}}} {float(s.queue_count)}",
        f"sglang:queue_time_seconds_sum{{{base}}} {s.queue_sum_s}",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def tgi(s: EngineState) -> str:
    lines = [
        "# TYPE tgi_queue_size gauge",
        f"tgi_queue_size {s.waiting}",
        "# TYPE tgi_batch_current_size gauge",
        f"tgi_batch_current_size {s.running}",
        "# TYPE tgi_request_success counter",
        f"tgi_request_success {s.queue_count}",
        "# TYPE tgi_request_generated_tokens histogram",
        f'tgi_request_generated_tokens_bucket{{le="+Inf"}} {s.queue_count}',
        f"tgi_request_generated_tokens_sum {s.generated}",
        f"tgi_request_generated_tokens_count {s.queue_count}",
        "# TYPE tgi_request_input_length histogram",
        f'tgi_request_input_length_bucket{{le="+Inf"}} {s.queue_count}',
        f"tgi_request_input_length_sum {s.prompted}",
        f"tgi_request_input_length_count {s.queue_count}",
        "# TYPE tgi_request_queue_duration histogram",
        f'tgi_request_queue_duration_bucket{{le="+Inf"}} {s.queue_count}',
        f"tgi_request_queue_duration_sum {s.queue_sum_s}",
        f"tgi_request_queue_duration_count {s.queue_count}",
    ]
    return "\n".join(lines) + "\n"


def llamacpp(s: EngineState) -> str:
    lines = [
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
        "# TYPE llamacpp:prompt_tokens_total counter",
        f"llamacpp:prompt_tokens_total {six_digits(s.prompted)}",
        "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.",
        "# TYPE llamacpp:tokens_predicted_total counter",
        f"llamacpp:tokens_predicted_total {six_digits(s.generated)}",
        "# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.",
        "# TYPE llamacpp:kv_cache_usage_ratio gauge",
        f"llamacpp:kv_cache_usage_ratio {six_digits(s.kv)}",
        "# HELP llamacpp:requests_processing Number of requests processing.",
        "# TYPE llamacpp:requests_processing gauge",
        f"llamacpp:requests_processing {s.running}",
        "# HELP llamacpp:requests_deferred Number of requests deferred.",
        "# TYPE llamacpp:requests_deferred gauge",
        f"llamacpp:requests_deferred {s.waiting}",
    ]
    return "\n".join(lines) + "\n"


def triton(s: EngineState) -> str:
    label = 'model="ensemble",version="1"'
    out = 'model="tensorrt_llm",response_metric_type="total_output_tokens",version="1"'
    into = 'model="tensorrt_llm",response_metric_type="total_input_tokens",version="1"'
    lines = [
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes",
        "# TYPE nv_inference_request_success counter",
        f"nv_inference_request_success{{{label}}} {s.queue_count}",
        "# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution",
        "# TYPE nv_inference_pending_request_count gauge",
        f"nv_inference_pending_request_count{{{label}}} {s.waiting}",
        "# HELP nv_trt_llm_request_metrics TRT LLM request metrics",
        "# TYPE nv_trt_llm_request_metrics gauge",
        f'nv_trt_llm_request_metrics{{model="tensorrt_llm",request_type="waiting",version="1"}} {s.waiting}',
        f'nv_trt_llm_request_metrics{{model="tensorrt_llm",request_type="active",version="1"}} {s.running}',
        'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 64',
        "# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics",
        "# TYPE nv_trt_llm_kv_cache_block_metrics gauge",
        f'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"}} {s.kv}',
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 4096',
        "# HELP nv_llm_output_token_len TRT LLM response metrics",
        "# TYPE nv_llm_output_token_len histogram",
        f"nv_llm_output_token_len_count{{{out}}} {s.queue_count}",
        f"nv_llm_output_token_len_sum{{{out}}} {s.generated}",
        "# HELP nv_llm_input_token_len TRT LLM response metrics",
        "# TYPE nv_llm_input_token_len histogram",
        f"nv_llm_input_token_len_count{{{into}}} {s.queue_count}",
        f"nv_llm_input_token_len_sum{{{into}}} {s.prompted}",
        "# HELP nv_inference_queue_summary_us Summary of inference queuing duration in microseconds",
        "# TYPE nv_inference_queue_summary_us summary",
        f"nv_inference_queue_summary_us_count{{{label}}} {s.queue_count}",
        f"nv_inference_queue_summary_us_sum{{{label}}} {s.queue_sum_s * 1e6}",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def builtin(s: EngineState) -> str:
    from cliffwatch.simulator.batching import EngineStats
    from cliffwatch.simulator.prometheus import render

    return render(EngineStats(waiting=s.waiting, running=s.running, max_batch=16, results={},
                              prompt_tokens_total=s.prompted, generation_tokens_total=s.generated, steps_total=0,
                              queue_time_seconds_sum=s.queue_sum_s, queue_time_count=s.queue_count,
                              preemptions_total=s.preempted, prefix_cache_queries_total=s.cache_queries,
                              prefix_cache_hits_total=s.cache_hits, kv_cache_usage=s.kv))  # fmt: skip


PAGES = {"vllm": vllm, "sglang": sglang, "tgi": tgi, "llamacpp": llamacpp, "triton": triton, "builtin": builtin}
# What each engine does not expose at all (so its profile has no series for it).
_NO_PREFIX = {"prefix_cache_hits", "prefix_cache_queries"}  # the profiles read the prefix cache of vLLM only
NOT_EXPOSED = {
    "vllm": set(),
    "sglang": set() | _NO_PREFIX,
    "tgi": {"kv_cache_usage", "preemptions"} | _NO_PREFIX,
    "llamacpp": {"preemptions", "queue_time"} | _NO_PREFIX,
    "triton": {"preemptions"} | _NO_PREFIX,
    "builtin": set(),
}
