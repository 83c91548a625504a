"""Reading the users' prompts for ``request.dataset``: ShareGPT, JSON lines, a downloaded Hugging Face dataset.

- ``sharegpt``: the ShareGPT JSON (a list of ``{"conversations": [{"from": "human", "value": ...},
  {"from": "gpt", "value": ...}, ...]}``): the first human turn is the prompt, the answer recorded after it
  gives ``max_tokens`` (its length in tokens);
- ``jsonl``: one object a line with ``prompt`` (a string) or ``messages`` (chat messages, sent as they are),
  optional ``max_tokens`` and ``class``;
- ``hf``: the directory of a Hugging Face dataset already downloaded (a ``huggingface-cli download`` snapshot):
  its ``.json`` files are read as ShareGPT, its ``.jsonl`` files as JSON lines. Parquet needs pyarrow, which
  cliffwatch does not depend on: convert such files to JSON lines first.

Lengths are in tokens under the scenario's tokenizer when it has one, else in words (the server's own count
is in the result's ``prompt_tokens.error`` either way). Entries outside ``min_prompt_tokens`` ..
``max_prompt_tokens`` are left out. Each kept prompt is prepared as the JSON its request body carries, so a
request only copies it (``bodies``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cliffwatch.adapters.loadgen.token_prompts import TokenCounter
from cliffwatch.adapters.workload.data_files import DataFileRefused, allowed_path, readable_data_file
from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.scenario.dataset import DatasetFormat, DatasetSizes, DatasetSpec, LoadedDataset
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import Api
from cliffwatch.domain.workload.prepared import DEFAULT_LIMITS, PreparationLimits

MAX_DATASET_BYTES = 1024 * 1024 * 1024
MAX_ENTRIES = 2_000_000
FIELD = "target.request.dataset.path"
_WHITESPACE = re.compile(r"[ \t\n\r]*")
TAG = "\u0000cliffwatch-tag\u0000"  # where the request's tag goes in a messages entry (never in real text)


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One kept prompt: ``text`` (a prompt) or ``messages`` (chat messages as given)."""

    text: str | None
    messages: list[dict[str, Any]] | None
    prompt_tokens: int
    output_tokens: int | None
    line: int = 0  # where the entry starts in its file
    field: str = "prompt"  # the field its prompt came from (prompt, messages, conversations)


def load_dataset(
    scenario: Scenario,
    *,
    data_dirs: tuple[Path, ...] | None,
    counter: TokenCounter | None,
    limits: PreparationLimits = DEFAULT_LIMITS,
) -> LoadedDataset | None:
    """The scenario's dataset read and filtered; None without one. Raises ``ScenarioInvalid`` naming
    ``target.request.dataset.path`` when it cannot be used (or is over ``limits``' bytes or rows)."""
    spec = scenario.target.request.dataset
    if spec is None:
        return None

    def refuse(reason: str) -> ScenarioInvalid:
        return ScenarioInvalid([Problem(path=FIELD, message=reason)], source=scenario.name)

    try:
        raw, entries = _read(spec, data_dirs=data_dirs, limits=limits)
    except DataFileRefused as exc:
        raise refuse(exc.reason) from exc
    except ValueError as exc:
        raise refuse(f"{spec.path}: {exc}") from exc
    chat = scenario.target.api is Api.OPENAI_CHAT
    kept: list[Entry] = []
    for line, item in entries:
        entry = _entry(item, counter, chat=chat)
        if entry is None:
            continue
        if entry.prompt_tokens < spec.min_prompt_tokens:
            continue
        if spec.max_prompt_tokens is not None and entry.prompt_tokens > spec.max_prompt_tokens:
            continue
        kept.append(dataclasses.replace(entry, line=line))
    if not kept:
        raise refuse(
            f"{spec.path}: no entry of the {len(entries):,} read has a usable prompt within the length filters"
        )
    sizes = DatasetSizes(
        prompt_tokens=tuple(e.prompt_tokens for e in kept),
        output_tokens=tuple(e.output_tokens for e in kept),
        digest=hashlib.sha256(raw).hexdigest(),
        lines=tuple(e.line for e in kept),
        prompt_fields=tuple(e.field for e in kept),
    )
    return LoadedDataset(
        sizes=sizes, prompts=tuple(_prepared(e, spec) for e in kept), read=len(entries), path=spec.path
    )


def _read(
    spec: DatasetSpec, *, data_dirs: tuple[Path, ...] | None, limits: PreparationLimits
) -> tuple[bytes, list[tuple[int, Any]]]:
    """The file's bytes (every file's, for a directory) and its items, each with the line it starts on."""
    most_bytes, most_rows = min(MAX_DATASET_BYTES, limits.max_file_bytes), min(MAX_ENTRIES, limits.max_rows)
    if spec.format is DatasetFormat.HF:
        directory = Path(allowed_path(spec.path, data_dirs=data_dirs))
        if not directory.is_dir():
            raise ValueError("a hf dataset is the directory of a downloaded one")
        files = sorted(p for p in directory.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file())
        if not files:
            parquet = any(p.suffix == ".parquet" for p in directory.rglob("*"))
            raise ValueError(
                "holds only parquet files: convert them to JSON lines" if parquet else "holds no .json or .jsonl file"
            )
        contents: list[bytes] = []
        items: list[tuple[int, Any]] = []
        for file in files:
            left = most_bytes - sum(map(len, contents))  # the limit holds for the directory as a whole
            data = readable_data_file(str(file), data_dirs=data_dirs, limit=max(0, left))
            contents.append(data)
            form = DatasetFormat.SHAREGPT if file.suffix == ".json" else DatasetFormat.JSONL
            try:
                items += _parse(data, form, rows=most_rows - len(items))
            except ValueError as exc:  # which file of the directory, by its path inside it
                raise ValueError(f"{file.relative_to(directory)} {exc}") from None
        return b"".join(contents), items
    data = readable_data_file(spec.path, data_dirs=data_dirs, limit=most_bytes)
    return data, _parse(data, spec.format, rows=most_rows)


def _parse(data: bytes, form: DatasetFormat, *, rows: int) -> list[tuple[int, Any]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8") from None
    items = _sharegpt(text) if form is DatasetFormat.SHAREGPT else _json_lines(text)
    parsed: list[tuple[int, Any]] = []
    for line, item in items:
        if len(parsed) >= rows:
            raise ValueError(f"line {line}: more than {rows:,} entries (CLIFFWATCH_PREPARE_MAX_ROWS)")
        parsed.append((line, item))
    return parsed


def _json_lines(text: str) -> Iterator[tuple[int, Any]]:
    for line, content in enumerate(text.splitlines(), start=1):
        if not content.strip():
            continue
        try:
            yield line, json.loads(content)
        except ValueError as exc:
            raise ValueError(f"line {line} is not JSON ({exc.args[0]})") from None


def _sharegpt(text: str) -> Iterator[tuple[int, Any]]:
    """A ShareGPT list, one conversation at a time (a decode of the whole list would hold the GIL for as long as
    it takes), each with the line it starts on."""
    decoder = json.JSONDecoder()
    at = _space(text, 0)
    if text[at : at + 1] != "[":
        raise ValueError("is not a ShareGPT list of conversations")
    at, line, counted = _space(text, at + 1), 1, 0
    if text[at : at + 1] == "]":
        return
    while True:
        line, counted = line + text.count("\n", counted, at), at
        try:
            item, at = decoder.raw_decode(text, at)
        except ValueError as exc:  # its message gives the line and column, never the text
            raise ValueError(f"is not JSON ({exc.args[0]})") from None
        yield line, item
        at = _space(text, at)
        if text[at : at + 1] == ",":
            at = _space(text, at + 1)
            continue
        if text[at : at + 1] == "]" and not text[at + 1 :].strip():
            return
        raise ValueError(f"line {line + text.count(chr(10), counted, at)}: expected , or ] after a conversation")


def _space(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


def _entry(item: Any, counter: TokenCounter | None, *, chat: bool) -> Entry | None:
    """A usable entry of either format, or None (an entry without a usable prompt is left out)."""
    if not isinstance(item, dict):
        return None
    turns = item.get("conversations")
    if isinstance(turns, list):  # ShareGPT
        for index, turn in enumerate(turns):
            if isinstance(turn, dict) and turn.get("from") == "human" and isinstance(turn.get("value"), str):
                answer = next((t.get("value") for t in turns[index + 1 :] if isinstance(t, dict)
                               and t.get("from") == "gpt" and isinstance(t.get("value"), str)), None)  # fmt: skip
                output = None if answer is None else _length(answer, counter)
                entry = _text_entry(turn["value"], output, counter)
                return None if entry is None else dataclasses.replace(entry, field="conversations")
        return None
    output = item.get("max_tokens")
    recorded = output if isinstance(output, int) and not isinstance(output, bool) and output > 0 else None
    if isinstance(item.get("prompt"), str):
        return _text_entry(item["prompt"], recorded, counter)
    messages = item.get("messages")
    if chat and isinstance(messages, list) and messages and all(_message(m) for m in messages):
        words = sum(_length(m["content"], counter) for m in messages)
        return Entry(
            text=None, messages=messages, prompt_tokens=max(1, words), output_tokens=recorded, field="messages"
        )
    return None


def _message(message: object) -> bool:
    return (
        isinstance(message, dict) and isinstance(message.get("role"), str) and isinstance(message.get("content"), str)
    )


def _text_entry(text: str, output: int | None, counter: TokenCounter | None) -> Entry | None:
    if not text.strip():
        return None
    tokens = counter.prompt(text) if counter is not None else len(text.split())
    return Entry(text=text, messages=None, prompt_tokens=max(1, tokens), output_tokens=output)


def _length(text: str, counter: TokenCounter | None) -> int:
    return counter.plain(text) if counter is not None else len(text.split())


def _prepared(entry: Entry, spec: DatasetSpec) -> bytes | tuple[bytes, bytes]:
    if entry.text is not None:
        return json.dumps(entry.text)[1:-1].encode()
    assert entry.messages is not None
    messages = [dict(m) for m in entry.messages]
    first_user = next((m for m in messages if m["role"] == "user"), messages[0])
    if spec.cache_bust:
        first_user["content"] = TAG + first_user["content"]
    encoded = json.dumps(messages)
    marker = json.dumps(TAG)[1:-1]
    before, found, after = encoded.partition(marker)
    return (before.encode(), after.encode()) if found else (encoded.encode(), b"")


def dataset_note(dataset: LoadedDataset, plan_prompts: list[int], plan_outputs: list[int]) -> str:
    """The result's note: the file, its digest, what was kept, and the drawn length distribution."""

    def spread(values: list[int]) -> str:
        ordered = sorted(values)
        if not ordered:
            return "none"
        p50, p90 = (ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.9))
        return f"p50 {p50}, p90 {p90}, max {ordered[-1]}"

    return (
        f"dataset {dataset.path} (sha256 {dataset.sizes.digest[:16]}): {len(dataset.prompts):,} of {dataset.read:,} "
        f"entries kept; drawn prompt tokens {spread(plan_prompts)}; drawn max_tokens {spread(plan_outputs)}"
    )


def dataset_notes(scenario: Scenario, dataset: LoadedDataset | None) -> tuple[str, ...]:
    """The note of the dataset a run draws from, with the lengths its plan drew (walks the plan once)."""
    if dataset is None:
        return ()
    from cliffwatch.domain.traffic.plan import iter_plan

    plan = [r for r in iter_plan(scenario) if r.entry >= 0]
    return (dataset_note(dataset, [r.prompt_tokens for r in plan], [r.max_tokens for r in plan]),)
