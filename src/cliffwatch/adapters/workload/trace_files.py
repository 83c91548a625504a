"""Reading production traces for trace arrivals: the public formats, bounded, with the line of any bad record.

- ``azure``: the Azure LLM inference traces (AzurePublicDataset, 2023/2024): CSV with the header
  ``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps as ``2023-11-16 18:15:46.6805900`` (UTC);
- ``mooncake``: the Mooncake traces (kvcache-ai/Mooncake): JSON lines with ``timestamp`` in milliseconds,
  ``input_length``, ``output_length`` (``hash_ids``, the prefix blocks, are read past);
- ``burstgpt``: BurstGPT (HPMLL/BurstGPT): CSV with ``Timestamp`` in seconds, ``Request tokens`` and
  ``Response tokens`` among its columns (a failed request's 0 response tokens is sent as 1);
- ``jsonl``: cliffwatch's own, JSON lines ``{"time_s": 0.5, "prompt_tokens": 120, "output_tokens": 64}``.

Times become seconds from the trace's first request. A file is read only below ``CLIFFWATCH_DATA_DIRS``
(``data_files``), at most ``MAX_TRACE_BYTES`` and ``MAX_TRACE_REQUESTS`` requests.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from array import array
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from cliffwatch.adapters.workload.data_files import DataFileRefused, readable_data_file
from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.trace import (
    MAX_TRACE_REQUESTS,
    TraceArrival,
    TraceFormat,
    TraceRequests,
    with_traces,
)
from cliffwatch.domain.workload.prepared import DEFAULT_LIMITS, PreparationLimits

MAX_TRACE_BYTES = 512 * 1024 * 1024


class TraceUnreadable(Exception):
    """A record the format does not allow; ``line`` counts from 1, the header included."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


def load_traces(
    scenario: Scenario,
    *,
    data_dirs: tuple[Path, ...] | None,
    limits: PreparationLimits = DEFAULT_LIMITS,
    reading: Callable[[str, str], None] = lambda field, path: None,
) -> Scenario:
    """``scenario`` with every trace phase's requests read and attached; raises ``ScenarioInvalid`` naming
    ``phases[i].arrival.path`` for a file that cannot be used (or is over ``limits``' bytes or rows).
    ``reading(field, path)`` is told of each file before it is read."""
    loaded: dict[int, TraceRequests] = {}
    problems: list[Problem] = []
    for index, phase in enumerate(scenario.phases):
        if not isinstance(phase.arrival, TraceArrival):
            continue
        field = f"phases[{index}].arrival.path"
        reading(field, phase.arrival.path)
        try:
            loaded[index] = read_trace(phase.arrival, data_dirs=data_dirs, limits=limits)
        except DataFileRefused as exc:
            problems.append(Problem(path=field, message=exc.reason))
        except TraceUnreadable as exc:
            problems.append(Problem(path=field, message=f"{phase.arrival.path}, {exc} ({phase.arrival.format.value})"))
    if problems:
        raise ScenarioInvalid(problems, source=scenario.name)
    return with_traces(scenario, loaded)


def read_trace(
    arrival: TraceArrival, *, data_dirs: tuple[Path, ...] | None, limits: PreparationLimits = DEFAULT_LIMITS
) -> TraceRequests:
    raw = readable_data_file(arrival.path, data_dirs=data_dirs, limit=min(MAX_TRACE_BYTES, limits.max_file_bytes))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceUnreadable(raw.count(b"\n", 0, exc.start) + 1, "is not UTF-8") from None
    # Straight into columns: no object a request is held (``TraceRequests``), so reading a million rows makes
    # no work for the garbage collector, whose full passes would hold every thread.
    times, prompts, outputs, lines = array("d"), array("q"), array("q"), array("q")
    for time_s, prompt, output, line in _READERS[arrival.format](text):
        if len(times) == limits.max_rows:
            raise TraceUnreadable(line, f"more than {limits.max_rows:,} requests (CLIFFWATCH_PREPARE_MAX_ROWS)")
        times.append(time_s)
        prompts.append(prompt)
        outputs.append(output)
        lines.append(line)
    if not times:
        raise TraceUnreadable(1, "holds no request")
    first = min(times)
    times = array("d", (t - first for t in times))
    return TraceRequests(times=times, prompts=prompts, outputs=outputs, lines=lines,
                         digest=hashlib.sha256(raw).hexdigest())  # fmt: skip


Record = tuple[float, int, int, int]  # time, prompt tokens, output tokens, line


def _csv(text: str, columns: tuple[str, str, str], time: Callable[[str], float]) -> Iterator[Record]:
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header is None:
        return
    names = [name.strip() for name in header]
    missing = [c for c in columns if c not in names]
    if missing:
        # The header found is not quoted: a file of the wrong kind (an .env, say) would show viewers its first line.
        raise TraceUnreadable(1, f"the header lacks {', '.join(missing)} (the format's columns: {', '.join(columns)})")
    at = [names.index(c) for c in columns]
    for line, row in enumerate(rows, start=2):
        if not row:
            continue
        if len(row) < len(names):
            raise TraceUnreadable(line, f"has {len(row)} fields, the header {len(names)}")
        yield _record(line, time(row[at[0]].strip()), row[at[1]], row[at[2]], columns)
        if line > MAX_TRACE_REQUESTS + 1:
            raise TraceUnreadable(line, f"more than {MAX_TRACE_REQUESTS:,} requests")


def _jsonl(text: str, keys: tuple[str, str, str], scale: float) -> Iterator[Record]:
    for line, content in enumerate(text.splitlines(), start=1):
        if not content.strip():
            continue
        if line > MAX_TRACE_REQUESTS:
            raise TraceUnreadable(line, f"more than {MAX_TRACE_REQUESTS:,} requests")
        try:
            item = json.loads(content)
        except ValueError as exc:
            raise TraceUnreadable(line, f"is not JSON ({exc.args[0]})") from None
        if not isinstance(item, dict) or any(k not in item for k in keys):
            raise TraceUnreadable(line, f"must be an object with {', '.join(keys)}")
        time = item[keys[0]]
        if isinstance(time, bool) or not isinstance(time, int | float):
            raise TraceUnreadable(line, f"{keys[0]} must be a number")
        yield _record(line, float(time) * scale, item[keys[1]], item[keys[2]], keys)


def _record(line: int, time: float, prompt: object, output: object, names: tuple[str, str, str]) -> Record:
    if not math.isfinite(time) or time < 0:
        raise TraceUnreadable(line, f"{names[0]} must be a finite time >= 0")
    counts = []
    for name, value in zip(names[1:], (prompt, output), strict=True):
        try:
            count = int(value.strip()) if isinstance(value, str) else value
        except ValueError:
            count = None
        # A bound on what is held; what may be sent is the caps' (at most the hard limit), judged on the replay.
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10_000_000:
            raise TraceUnreadable(line, f"{name} must be a whole number of tokens from 0 to 10,000,000")
        counts.append(count)
    return time, counts[0], counts[1], line


def _azure_time(text: str) -> float:
    """``2023-11-16 18:15:46.6805900``: seconds since the epoch (UTC); Python's parser takes six digits."""
    whole, _, fraction = text.partition(".")
    try:
        moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return float(text)  # some copies carry seconds already; a bad one fails as not a number
    return moment.timestamp() + (float(f"0.{fraction}") if fraction.isdigit() else 0.0)


def _number(text: str) -> float:
    return float(text)


def _read_azure(text: str) -> Iterator[Record]:
    return _csv(text, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), _checked(_azure_time))


def _read_burstgpt(text: str) -> Iterator[Record]:
    return _csv(text, ("Timestamp", "Request tokens", "Response tokens"), _checked(_number))


def _checked(parse: Callable[[str], float]) -> Callable[[str], float]:
    def time(text: str) -> float:
        try:
            return parse(text)
        except ValueError:
            return math.nan  # refused by _record with the line and the column's name

    return time


_READERS: dict[TraceFormat, Callable[[str], Iterator[Record]]] = {
    TraceFormat.AZURE: _read_azure,
    TraceFormat.MOONCAKE: lambda text: _jsonl(text, ("timestamp", "input_length", "output_length"), 0.001),
    TraceFormat.BURSTGPT: _read_burstgpt,
    TraceFormat.JSONL: lambda text: _jsonl(text, ("time_s", "prompt_tokens", "output_tokens"), 1.0),
}
