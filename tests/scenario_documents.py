"""Scenario documents for tests: a full one (every section), a minimal one and one on the built-in target;
importable from every test directory, like report_kit."""

from __future__ import annotations

from typing import Any


def full_document() -> dict[str, Any]:
    """A document that sets (nearly) every option, each to something other than its default."""
    return {
        "name": "burst-and-back",
        "description": "A burst against a slow target, then the way back.",
        "seed": 7,
        "slo": {"e2e_ms": 2000, "timeout_ms": 6000, "ttft_ms": 500, "tpot_ms": 40},
        "proxies": [{"name": "llm", "listen": "127.0.0.1:0", "upstream": "localhost:8000"}],
        "target": {
            "url": "http://localhost:8000/",
            "api": "openai-chat",
            "via_proxy": "llm",
            "request": {
                "model": "sim-llm",
                "headers": {"Authorization": "Bearer token"},
                "prompt_tokens": {"dist": "uniform", "min": 64, "max": 256},
                "max_tokens": {"dist": "choice", "values": [32, 128], "weights": [3, 1]},
                "stream": True,
                "include_usage": True,
                "extra_body": {"ignore_eos": True},
            },
        },
        "client": {
            "pool_size": 64,
            "connect_timeout_ms": 1000,
            "read_timeout_ms": 3000,
            "attempt_timeout_ms": 5000,
            "max_in_flight": 2000,
            "follow_redirects": True,
            "max_redirects": 3,
            "retry": {
                "policy": "exponential",
                "max_retries": 2,
                "retry_on": ["timeout", 503],
                "base_ms": 50,
                "cap_ms": 800,
                "jitter": "equal",
                "honour_retry_after": True,
                "budget": {"ratio": 0.2},
            },
        },
        "phases": [
            {"name": "warmup", "role": "baseline", "duration_s": 30, "arrival": {"process": "constant", "rate": 4}},
            {
                "name": "burst",
                "role": "stress",
                "duration_s": 60,
                "arrival": {"process": "spike", "base_rate": 4, "burst_rate": 40, "burst_s": 5, "period_s": 20},
                "retry": {"policy": "immediate", "max_retries": 1},
                "faults": [{"proxy": "llm", "type": "latency", "attributes": {"latency": 300, "jitter": 50}}],
            },
            {"name": "cooldown", "role": "recovery", "duration_s": 30, "arrival": {"process": "poisson", "rate": 4}},
        ],
        "abort": {
            "baseline_unhealthy": {"min_on_time_ratio": 0.8},
            "error_rate": {"window_s": 5, "max_ratio": 0.5, "min_requests": 10, "outcomes": ["error", "shed"]},
        },
        "score": {"threshold": 75, "fast_fail_fraction": 0.2},
    }


def minimal_document() -> dict[str, Any]:
    return {
        "name": "minimal",
        "slo": {"e2e_ms": 2000, "timeout_ms": 5000},
        "target": {"url": "builtin", "request": {"model": "sim-llm"}},
        "phases": [
            {"name": "steady", "role": "baseline", "duration_s": 10, "arrival": {"process": "constant", "rate": 5}}
        ],
    }


def http_document() -> dict[str, Any]:
    return {
        "name": "plain-http",
        "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "target": {
            "url": "https://api.example.test/base",
            "api": "http",
            "request": {"method": "POST", "path": "/echo", "headers": {"X-Run": "1"}, "body": {"q": [1, "a", None]}},
        },
        "phases": [
            {
                "name": "ramp",
                "role": "stress",
                "duration_s": 20,
                "arrival": {"process": "step", "steps": [{"rate": 1, "duration_s": 10}, {"rate": 9, "duration_s": 10}]},
            }
        ],
    }


def builtin_document() -> dict[str, Any]:
    return {
        "name": "builtin-sim",
        "seed": 3,
        "slo": {"e2e_ms": 3000, "timeout_ms": 3000, "ttft_ms": 800},
        "proxies": [{"name": "sim"}],
        "target": {
            "url": "builtin",
            "api": "openai-completions",
            "via_proxy": "sim",
            "builtin": {"max_batch": 8, "admission": "queue_limit", "max_queue": 16},
            "request": {
                "model": "sim-llm",
                "prompt_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.8, "max": 4000},
                "max_tokens": {"dist": "fixed", "value": 64},
                "stream": False,
            },
        },
        "client": {"retry": {"policy": "immediate", "max_retries": 3, "retry_on": ["5xx", "connection"]}},
        "phases": [
            {
                "name": "base",
                "role": "baseline",
                "duration_s": 10,
                "arrival": {"process": "gamma", "rate": 3, "burstiness": 2},
            },
            {
                "name": "chaos",
                "role": "stress",
                "duration_s": 20,
                "arrival": {"process": "poisson", "rate": 20},
                "faults": [
                    {"proxy": "sim", "type": "slicer", "attributes": {"average_size": 64, "size_variation": 32}},
                    {"proxy": "sim", "type": "reset_peer", "stream": "upstream", "toxicity": 0.1},
                ],
            },
            {"name": "after", "role": "recovery", "duration_s": 10, "arrival": {"process": "constant", "rate": 3}},
        ],
        "abort": {"error_rate": {"max_ratio": 0.9}},
    }
