"""Response headers that carry the server's state (queue time, rate limits, back-off, load), read as numbers.

The names and formats are those real servers and gateways send (docs/server-metrics.md cites each):

- queue and processing times, in milliseconds: TGI's ``x-queue-time``, ``x-inference-time``, ``x-total-time``,
  ``x-validation-time``, ``x-time-per-token`` (and ``x-compute-time`` in seconds), OpenAI's
  ``openai-processing-ms``, Envoy's ``x-envoy-upstream-service-time``, Kong's ``x-kong-upstream-latency`` and
  ``x-kong-proxy-latency``, LiteLLM's ``x-litellm-response-duration-ms`` and ``x-litellm-overhead-duration-ms``;
- back-off: ``retry-after`` (seconds or an HTTP date), ``retry-after-ms`` and ``x-ms-retry-after-ms``;
- rate limits: ``x-ratelimit-*`` (OpenAI, Azure, LiteLLM, Envoy; a ``reset`` as a Go duration like ``6m0s`` or
  in seconds), ``anthropic-ratelimit-*`` (a ``reset`` as an RFC 3339 time), the IETF draft's ``ratelimit-*``
  and ``ratelimit`` (``"name";r=50;t=30``);
- load: Azure's ``azure-openai-deployment-utilization`` (``"87.5%"``) and the ORCA ``endpoint-load-metrics``
  that vLLM and Triton can send (``TEXT named_metrics.num_requests_waiting=3.0, …`` or ``JSON {…}``).

Streamed answers carry none of the timing headers (their headers leave before the answer is known: TGI,
vLLM); that absence is by design and summarised as such, not as an error. A value that is missing, negative
(Azure's ``-1`` for "not reported") or unreadable is left out. Pure: names and texts in, readings out.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import datetime
from email.utils import parsedate_to_datetime

# Exact names: the unit a reading is kept in, and how the header's text becomes it.
MILLISECONDS = frozenset({
    "x-queue-time", "x-inference-time", "x-total-time", "x-validation-time", "x-time-per-token",
    "openai-processing-ms", "x-envoy-upstream-service-time", "x-kong-upstream-latency", "x-kong-proxy-latency",
    "x-litellm-response-duration-ms", "x-litellm-overhead-duration-ms", "retry-after-ms", "x-ms-retry-after-ms",
})  # fmt: skip
COUNTS = frozenset({"x-prompt-tokens", "x-generated-tokens", "x-litellm-attempted-retries"})
PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "ratelimit-", "x-litellm-key-remaining-")
SPECIAL = frozenset({"x-compute-time", "retry-after", "azure-openai-deployment-utilization", "ratelimit",
                     "endpoint-load-metrics"})  # fmt: skip
MAX_READINGS = 16  # per response: a page of headers cannot grow a run's memory without bound
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\s*$")


def watched(name: str) -> bool:
    """Whether a header (its lower-case name) carries server state this module reads."""
    return name in MILLISECONDS or name in COUNTS or name in SPECIAL or name.startswith(PREFIXES)


def unit_of(name: str) -> str:
    """The unit a reading named ``name`` is kept in: ms, s, %, or count."""
    if name in MILLISECONDS or name == "x-compute-time":
        return "ms"
    if name == "retry-after" or name.endswith(("-reset", " reset")) or "-reset-" in name:
        return "s"
    if name == "azure-openai-deployment-utilization":
        return "%"
    return "count"


def _number(text: str) -> float | None:
    if not _NUMBER.match(text):
        return None
    value = float(text)
    return value if math.isfinite(value) and value >= 0 else None


def go_duration_s(text: str) -> float | None:
    """Seconds of a Go duration ("6m0s", "20ms", "23h47m36.648s"), or of a bare number of seconds."""
    text = text.strip()
    plain = _number(text)
    if plain is not None:
        return plain
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != text:
        return None
    return math.fsum(float(n) * _GO_UNITS[u] for n, u in parts)


def _seconds_until(text: str, now: datetime | None) -> float | None:
    """Seconds from ``now`` (the response's Date) to an RFC 3339 or HTTP date; None without a ``now``."""
    if now is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


def readings(headers: Iterable[tuple[str, str]], *, date: datetime | None = None) -> tuple[tuple[str, float], ...]:
    """Every number the server-state headers of one response carry: (name, value), values in ``unit_of(name)``.

    ``headers`` are (lower-case name, text) pairs already filtered by ``watched``; ``date`` is the response's
    ``Date``, against which absolute reset times are made relative (without it they are left out)."""
    found: list[tuple[str, float]] = []
    for name, text in headers:
        if len(found) >= MAX_READINGS:
            break
        found.extend(_read(name, text, date))
    return tuple(found[:MAX_READINGS])


def _read(name: str, text: str, date: datetime | None) -> list[tuple[str, float]]:
    value: float | None
    if name in MILLISECONDS or name in COUNTS:
        value = _number(text)
    elif name == "x-compute-time":  # TGI: seconds, as a float
        seconds = _number(text)
        value = None if seconds is None else seconds * 1000
    elif name == "retry-after":
        value = _number(text)
        value = _seconds_until(text, date) if value is None else value
    elif name == "azure-openai-deployment-utilization":
        value = _number(text.strip().removesuffix("%"))
    elif name == "ratelimit":
        return _ietf(text)
    elif name == "endpoint-load-metrics":
        return _orca(text)
    elif "reset" in name:
        value = go_duration_s(text)
        if value is None:
            value = _seconds_until(text, date)
        elif value > 1e9:  # a Unix time, as some servers send
            value = None if date is None else max(0.0, value - date.timestamp())
    else:
        first = re.split(r"[,;]", text, maxsplit=1)[0]  # Envoy's "10, 10;w=60": the limit is the first number
        value = _number(first)
    return [] if value is None else [(name, value)]


def _ietf(text: str) -> list[tuple[str, float]]:
    """The IETF draft's ``RateLimit: "name";r=50;t=30``: the first item's remaining quota and reset seconds."""
    item = text.split(",", 1)[0]
    found = []
    for key, label in (("r", "ratelimit remaining"), ("t", "ratelimit reset")):
        match = re.search(rf";\s*{key}=(\d+)", item)
        if match:
            found.append((label, float(match.group(1))))
    return found


def _orca(text: str) -> list[tuple[str, float]]:
    """vLLM's and Triton's ORCA load report: ``TEXT named_metrics.k=v, …`` or ``JSON {"named_metrics": {…}}``."""
    kind, _, rest = text.strip().partition(" ")
    metrics: dict[str, object] = {}
    if kind.upper() == "JSON":
        try:
            document = json.loads(rest)
        except ValueError:
            return []
        named = document.get("named_metrics") if isinstance(document, dict) else None
        metrics = named if isinstance(named, dict) else {}
    elif kind.upper() == "TEXT":
        for part in rest.split(","):
            key, _, value = part.strip().partition("=")
            metrics[key.removeprefix("named_metrics.")] = value
    found: list[tuple[str, float]] = []
    for key, raw in sorted(metrics.items())[:MAX_READINGS]:
        number = _number(str(raw))
        if number is not None and re.fullmatch(r"[A-Za-z0-9_:.]{1,64}", key):
            found.append((f"endpoint-load-metrics {key}", number))
    return found
