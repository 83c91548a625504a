"""Where the service reads documents: in one thread of its own, so the event loop keeps answering.

Within the limits, YAML costs about 3.5 µs a value (35 ms for 10,000 values, in a thread that lets the loop
run every few milliseconds); JSON costs about 0.3 µs, so small JSON bodies are parsed in the loop itself.
One thread, so documents are read one at a time, whoever sends them: the loop then shares the interpreter
with at most one parser, and the loop's default executor (DNS lookups) with none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import yaml

from cliffwatch.adapters.documents.json_loader import load_json
from cliffwatch.adapters.documents.limits import DocumentLimits

T = TypeVar("T")
# The largest JSON text parsed in the event loop: at most ~3 ms there, whatever it holds.
INLINE_JSON_BYTES = 64 * 1024
_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cliffwatch-documents")


async def load_off_loop(load: Callable[[str | bytes, DocumentLimits], T], text: str | bytes,
                        limits: DocumentLimits) -> T:  # fmt: skip
    """``load(text, limits)`` (``load_yaml`` or ``load_json``), in the documents thread unless it is JSON of
    at most ``INLINE_JSON_BYTES``; raises what ``load`` raises."""
    if load is load_json and len(text) <= INLINE_JSON_BYTES:
        return load(text, limits)
    return await asyncio.get_running_loop().run_in_executor(_THREAD, load, text, limits)


async def off_loop(work: Callable[[], T]) -> T:
    """``work()`` in the documents thread: other work whose cost grows with a document (showing one as YAML)."""
    return await asyncio.get_running_loop().run_in_executor(_THREAD, work)


def dump_yaml(document: Any) -> str:
    """A document as block YAML, keys in their order, Unicode as itself (libyaml's emitter when there is one,
    three times faster than PyYAML's)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text: str = yaml.dump(document, Dumper=dumper, sort_keys=False, allow_unicode=True)
    return text
