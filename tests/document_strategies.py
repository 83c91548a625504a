"""Hypothesis strategies for hostile scenario documents, as the text a user or an attacker would send: a valid
scenario with one part replaced by something hostile (huge or odd numbers, NUL, odd Unicode and unpaired
surrogates, very long strings, deep nesting, aliases that loop or explode), written as JSON or YAML, and
sometimes cut, padded or salted afterwards. Pure noise alone would almost never get past the first key, so
most examples start from a document the validator accepts.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import strategies as st

BASE: dict[str, Any] = {
    "name": "fuzz",
    "seed": 7,
    "slo": {"e2e_ms": 1000, "timeout_ms": 3000, "ttft_ms": 500},
    "target": {"url": "builtin", "api": "openai-chat", "request": {"model": "m", "max_tokens": 10}},
    "client": {"pool_size": 10, "retry": {"policy": "exponential", "max_retries": 2}},
    "phases": [
        {"name": "calm", "role": "baseline", "duration_s": 2, "arrival": {"process": "constant", "rate": 4}},
        {"name": "burst", "role": "stress", "duration_s": 1, "arrival": {"process": "poisson", "rate": 8}},
    ],
}
HTTP_BASE: dict[str, Any] = {
    **BASE,
    "target": {"url": "http://127.0.0.1:9", "api": "http", "request": {"method": "POST", "path": "/x", "body": [1]}},
}
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
RAW = "\x00raw\x00"  # a leaf written into the text as it is, not as JSON: numbers JSON and YAML disagree on

ODD_TEXT = ["\x00", "a\x00b", "\ud800", "x\udfffy", "\ufeff", "\u2028\u2029", "\u202eevil", "\U0010ffff", "é",
            "𝔘𝔫𝔦", "\r\n", "\t", "\x1b[31m", "", " ", "~", "null", "yes", "on", "2026-11-30", "0x1F", "1e400",
            "<script>", "${HOME}", "*alias", "&anchor", "!!python/object:os.system"]  # fmt: skip
RAW_NUMBERS = ["1" * 5_000, "-" + "9" * 401, "1e400", "-1e400", "1e-400", "NaN", "Infinity", "-Infinity", ".inf",
               ".nan", "0x7fffffffffffffff", "0o777", "1_000_000", "1:30:00", "-0", "0.0000000000000000000001",
               "123456789012345678901234567890", "18446744073709551616", "9" * 400]  # fmt: skip


def texts() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=40),
        st.sampled_from(ODD_TEXT),
        st.builds(lambda a, b: a + b, st.sampled_from(ODD_TEXT), st.text(max_size=10)),
        st.integers(1_000, 50_000).map(lambda n: "x" * n),
    )


def numbers() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(),
        st.integers(min_value=2**63 - 2, max_value=2**64 + 2),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([0, -1, 1e308, 5e-324, 10**300, -(10**300)]),
        st.just(RAW),
    )


def values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.none(), st.booleans(), numbers(), texts())
    return st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts(), inner, max_size=4), max_leaves=12
    )


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, item in node.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found += _paths(item, (*prefix, index))
    return found


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


@st.composite
def mutated(draw: st.DrawFn) -> tuple[Any, list[str]]:
    """A valid scenario (LLM or plain HTTP) with one to three parts replaced or added, and the raw number
    strings to put where ``RAW`` stands."""
    document = copy.deepcopy(draw(st.sampled_from([BASE, HTTP_BASE])))
    if draw(st.booleans()):  # hostile content where any content is valid: the document stays a scenario
        document["description"] = draw(texts())
        request = document["target"]["request"]
        if "body" in request:
            request["body"] = draw(values())
        else:
            request["extra_body"] = draw(st.dictionaries(texts(), values(), max_size=4))
        return document, draw(st.lists(st.sampled_from(RAW_NUMBERS), min_size=8, max_size=8))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(document)))
        if not path:
            continue
        current = _at(document, path)
        if isinstance(current, bool) or not draw(st.booleans()):
            value = draw(values())
        elif isinstance(current, int | float):  # a hostile value of the kind expected: validation goes deeper
            value = draw(numbers())
        elif isinstance(current, str):
            value = draw(texts())
        else:
            value = draw(values())
        *parents, last = path
        holder = document
        for step in parents:
            holder = holder[step]
        if isinstance(holder, dict) and draw(st.booleans()):
            holder[draw(texts())] = value  # a key of its own beside the one chosen
        else:
            holder[last] = value
    raws = draw(st.lists(st.sampled_from(RAW_NUMBERS), min_size=8, max_size=8))
    return document, raws


def _as_json(document: Any, raws: list[str], ascii_only: bool) -> str:
    text = json.dumps(document, ensure_ascii=ascii_only)
    for raw in raws:
        text = text.replace(json.dumps(RAW), raw, 1)
    return text.replace(json.dumps(RAW), raws[0])


def _as_yaml(document: Any, raws: list[str], unicode: bool) -> str | None:
    try:
        text = yaml.dump(document, Dumper=DUMPER, allow_unicode=unicode, sort_keys=False, width=120)
    except (yaml.YAMLError, UnicodeEncodeError, ValueError):
        return None
    quoted = [q for q in (f"'{RAW}'", f'"{RAW}"', '"\\0raw\\0"', '"\\x00raw\\x00"') if q in text]
    for raw in raws:
        for q in quoted:
            text = text.replace(q, raw, 1)
    return text


BOMB = "bomb:\n" + "\n".join(
    [
        "  a0: &a0 [x, x, x, x, x, x, x, x, x]",
        *(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)),
    ]
)
SALTS = [
    lambda t: "\ufeff" + t,
    lambda t: t + "\n" + BOMB + "\n",
    lambda t: t + "\nloop: &loop [1, *loop]\n",
    lambda t: t + "\nnested: " + "[" * 70 + "]" * 70 + "\n",
    lambda t: t + "\nnested: " + "[" * 5_000 + "]" * 5_000 + "\n",
    lambda t: t + "\nmany: [" + ",".join(["0"] * 20_000) + "]\n",
    lambda t: t + "\n---\nsecond: document\n",
    lambda t: t.replace(":", ": &dup x\nalso: &dup", 1),
    lambda t: t.replace("\n", "\r\n"),
]


@st.composite
def hostile_texts(draw: st.DrawFn) -> str:
    """The text of a hostile scenario document: JSON or YAML, salted, cut or wholly random."""
    kind = draw(st.sampled_from(["json", "yaml", "yaml", "random"]))
    if kind == "random":
        return draw(st.text(max_size=300))
    document, raws = draw(mutated())
    text = (_as_json(document, raws, draw(st.booleans())) if kind == "json"
            else _as_yaml(document, raws, draw(st.booleans())))  # fmt: skip
    if text is None:
        text = _as_json(document, raws, True)
    if draw(st.booleans()):
        text = draw(st.sampled_from(SALTS))(text)
    if draw(st.integers(0, 9)) == 0:  # cut short anywhere
        text = text[: draw(st.integers(0, len(text)))]
    return text


@st.composite
def hostile_json_bodies(draw: st.DrawFn) -> str:
    """JSON text of a hostile scenario document (what the API's bodies carry), salted for JSON."""
    document, raws = draw(mutated())
    text = _as_json(document, raws, draw(st.booleans()))
    salt = draw(st.sampled_from(["", "deep", "deeper", "many", "nul", "cut", "surrogate"]))
    if salt == "deep":
        text = text[:-1] + ', "x": ' + "[" * 70 + "]" * 70 + "}"
    elif salt == "deeper":
        text = text[:-1] + ', "x": ' + '{"a":' * 3_000 + "1" + "}" * 3_000 + "}"
    elif salt == "many":
        text = text[:-1] + ', "x": [' + ",".join(["0"] * 20_000) + "]}"
    elif salt == "nul":
        text = text.replace('"', '"\\u0000', 1)
    elif salt == "surrogate":
        text = text.replace('"', '"\\udc80', 1)
    elif salt == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    return text
