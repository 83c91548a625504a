"""The rule for docs/api.md's ``http`` and ``json`` examples: every one is checked against the OpenAPI document.

- ``http``: one or more messages. A request (``POST /api/v1/runs``, headers, a blank line, a body) must name
  an operation of the document, and its body must be valid against that operation's request schema. A
  response (``HTTP/1.1 202 Accepted`` …) answers the request before it in its block, or else the operation
  the page names last before it (a request line, or a `` `POST /api/v1/…` `` in a heading or the text); it
  must be a status the operation documents, with its required headers and a body valid against that
  status's schema.
- ``json``: a problem (``"type": "tag:cliffwatch.dev,…"``) is checked against the problem schema, a sweep's
  result file (``"kind": "sweep"`` with a ``format``) against the sweep branch of a run's ``result``; any other
  body is the success answer of the operation the page names last before it (a request line, or a
  `` `GET /api/v1/…` `` in a heading or the text).

Examples may elide: a ``"…": "…"`` member or a ``"…"`` item stands for more of the same, and a string with
``…`` in it for a shortened value. An elided object need not have every required member, and a shortened
string need not match its pattern; everything shown must still be valid (names, types, enums, shapes).
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from sybil import Example

from openapi_kit import DOCUMENT, operation, resolve

ELLIPSIS = "…"
_REQUEST = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) (/\S*)( HTTP/1\.1)?$")
_RESPONSE = re.compile(r"^HTTP/1\.1 (\d{3})( .*)?$")
_MENTION = re.compile(r"(GET|POST|PUT|PATCH|DELETE) (/api/v1/[^\s`?]*)")
_PROBLEM_TYPE = "tag:cliffwatch.dev,2026:problem:"


def elided(body: Any, elided_objects: set[int]) -> Any:
    """``body`` without its ``…`` members and items; the ids of the objects that lost one go into
    ``elided_objects``."""
    if isinstance(body, dict):
        kept = {k: elided(v, elided_objects) for k, v in body.items() if k != ELLIPSIS}
        if len(kept) < len(body):
            elided_objects.add(id(kept))
        return kept
    if isinstance(body, list):
        return [elided(item, elided_objects) for item in body if item != ELLIPSIS]
    return body


def schema_problems(body: Any, schema: dict[str, Any]) -> list[str]:
    """What in ``body`` breaks ``schema``, elisions allowed (module docstring)."""
    shortened: set[int] = set()
    instance = elided(body, shortened)
    whole = {"components": DOCUMENT["components"], "allOf": [schema]}
    validator = jsonschema.Draft202012Validator(whole, format_checker=jsonschema.FormatChecker())
    return [line for error in validator.iter_errors(instance) for line in _described(error, shortened)]


def _described(error: jsonschema.ValidationError, shortened: set[int]) -> list[str]:
    """An error not excused, said where it is; for anyOf / oneOf, the errors of the branch that came closest."""
    if _excused(error, shortened):
        return []
    if error.context:
        branches: dict[Any, list[str]] = {}
        wrong_type: set[Any] = set()  # branches for another type altogether (null, a string): not the closest
        for sub in error.context:
            branch = sub.relative_schema_path[0]
            branches.setdefault(branch, []).extend(_described(sub, shortened))
            if sub.validator == "type" and list(sub.absolute_path) == list(error.absolute_path):
                wrong_type.add(branch)
        candidates = [lines for branch, lines in branches.items() if branch not in wrong_type]
        candidates = candidates or list(branches.values())
        closest = min(candidates, key=len)
        if closest:
            return closest
    return [f"{'/'.join(str(p) for p in error.absolute_path) or '(body)'}: {error.message[:300]}"]


def _excused(error: jsonschema.ValidationError, shortened: set[int]) -> bool:
    if error.validator == "required" and id(error.instance) in shortened:
        return True
    if isinstance(error.instance, str) and ELLIPSIS in error.instance:
        return True
    if error.context:  # anyOf / oneOf: excused when one branch fails only in excused ways
        branches: dict[Any, list[jsonschema.ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        return any(all(_excused(sub, shortened) for sub in subs) for subs in branches.values())
    return False


class ApiExamples:
    """The ``http`` and ``json`` rules."""

    def __init__(self) -> None:
        self.last_request: dict[str, tuple[str, str]] = {}  # page path -> (method, path) of its block's request

    def http(self, example: Example) -> str | None:
        problems: list[str] = []
        seen_request = False
        for start, headers, body in _messages(str(example.parsed)):
            if (request := _REQUEST.match(start)) is not None:
                seen_request = True
                method, path = request.group(1), request.group(2)
                self.last_request[example.path] = (method, path)
                problems += _check_request(method, path, body)
            elif (response := _RESPONSE.match(start)) is not None:
                mentions = _MENTION.findall(example.document.text[: example.region.start])
                asked = self.last_request.get(example.path) if seen_request else (mentions[-1] if mentions else None)
                if asked is None:
                    problems.append(f"{start}: no request before it to answer")
                else:
                    problems += _check_response(*asked, int(response.group(1)), headers, body)
            else:
                problems.append(f"{start!r} is neither a request line nor a status line")
        return "\n".join(problems) or None

    def json(self, example: Example) -> str | None:
        body = json.loads(str(example.parsed))
        if isinstance(body, dict) and str(body.get("type", "")).startswith(_PROBLEM_TYPE):
            return _joined(schema_problems(body, _problem_schema()))
        if isinstance(body, dict) and body.get("kind") == "sweep" and "format" in body:  # a sweep's result file
            return _joined([f"sweep result: {p}" for p in schema_problems(body, _sweep_result_schema())])
        mentions = _MENTION.findall(example.document.text[: example.region.start])
        if not mentions:
            return "no operation is named before this body"
        method, path = mentions[-1]
        found = operation(method, path)
        if found is None:
            return f"{method} {path} is not in the OpenAPI document"
        template, op = found
        ok = sorted(code for code in op["responses"] if code.startswith("2"))
        spec = resolve(op["responses"][ok[0]])
        schema = spec["content"]["application/json"]["schema"]
        return _joined([f"{method} {template} {ok[0]}: {p}" for p in schema_problems(body, schema)])


def _messages(source: str) -> list[tuple[str, dict[str, str], Any]]:
    """The messages of an http block: start line, headers, JSON body (None when there is none)."""
    lines = source.rstrip("\n").split("\n")
    starts = [i for i, line in enumerate(lines) if _REQUEST.match(line) or _RESPONSE.match(line)]
    messages = []
    for n, first in enumerate(starts or [0]):
        chunk = lines[first : starts[n + 1] if n + 1 < len(starts) else len(lines)]
        blank = chunk.index("") if "" in chunk else len(chunk)
        headers = dict(line.split(": ", 1) for line in chunk[1:blank])
        text = "\n".join(chunk[blank + 1 :]).strip()
        messages.append((chunk[0], headers, json.loads(text) if text else None))
    return messages


def _check_request(method: str, path: str, body: Any) -> list[str]:
    found = operation(method, path)
    if found is None:
        return [f"{method} {path} is not in the OpenAPI document"]
    template, op = found
    if body is None:
        needs = op.get("requestBody", {}).get("required", False)
        return [f"{method} {template}: the operation needs a body"] if needs else []
    if "requestBody" not in op:
        return [f"{method} {template} takes no body"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    return [f"{method} {template} body: {p}" for p in schema_problems(body, schema)]


def _check_response(method: str, path: str, status: int, headers: dict[str, str], body: Any) -> list[str]:
    found = operation(method, path)
    if found is None:
        return []  # its request was reported
    template, op = found
    if str(status) not in op["responses"]:
        return [f"{method} {template}: {status} is not a documented answer"]
    spec = resolve(op["responses"][str(status)])
    problems = [f"{method} {template} {status}: no {name} header" for name, header in spec.get("headers", {}).items()
                if header.get("required") and name not in headers]  # fmt: skip
    if body is not None:
        media = next(iter(spec.get("content", {})), None)
        if media is None:
            return [*problems, f"{method} {template} {status}: a body where none is documented"]
        schema = spec["content"][media]["schema"]
        problems += [f"{method} {template} {status}: {p}" for p in schema_problems(body, schema)]
    return problems


def _problem_schema() -> dict[str, Any]:
    return dict(resolve(DOCUMENT["components"]["responses"]["Error"])["content"]["application/problem+json"]["schema"])


def _sweep_result_schema() -> dict[str, Any]:
    """A sweep's result document: what ``cliffwatch sweep --json`` writes and the API's ``result`` holds."""
    branches = DOCUMENT["components"]["schemas"]["RunDetail"]["properties"]["result"]["anyOf"]
    return dict(next(b for b in branches if b.get("properties", {}).get("kind", {}).get("const") == "sweep"))


def _joined(problems: list[str]) -> str | None:
    return "\n".join(problems) or None
