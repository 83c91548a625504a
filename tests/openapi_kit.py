"""The OpenAPI document as the tests read it: finding an operation by method and path, and following
``$ref``s. Shared by the API tests (``api_harness``) and the docs examples' rule (``api_examples_kit``)."""

from __future__ import annotations

import re
from typing import Any

from cliffwatch.adapters.api.openapi import openapi_document

DOCUMENT = openapi_document()


def operation(method: str, path: str) -> tuple[str, dict[str, Any]] | None:
    """The document's operation for ``method`` and a concrete (or templated) ``path``, query dropped: its
    template and the operation."""
    path = path.split("?")[0]
    for template, item in DOCUMENT["paths"].items():
        pattern = "^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)) + "$"
        if (re.match(pattern, path) or path == template) and method.lower() in item:
            return template, item[method.lower()]
    return None


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its ``$ref`` followed (again, while it is one)."""
    while "$ref" in node and len(node) == 1:
        *_, kind, name = node["$ref"].split("/")
        node = DOCUMENT["components"][kind][name]
    return node
