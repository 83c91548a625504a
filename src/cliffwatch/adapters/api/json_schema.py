"""JSON Schema 2020-12 as the OpenAPI document writes it: references to components, nullable values, closed
objects, bounded text, and the leaf schemas every body uses.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or null (3.1 has no ``nullable``: a type list, or anyOf for references)."""
    if "type" in schema and isinstance(schema["type"], str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def obj(properties: dict[str, Schema], *, required: tuple[str, ...] | None = None, closed: bool = True) -> Schema:
    """An object; every property required unless ``required`` says otherwise. Responses are ``closed`` (no
    other properties) so the document cannot silently fall behind the code."""
    schema: Schema = {"type": "object", "properties": properties,
                      "required": list(properties if required is None else required)}  # fmt: skip
    if closed:
        schema["additionalProperties"] = False
    return schema


def text(max_length: int, **extra: Any) -> Schema:
    return {"type": "string", "minLength": 1, "maxLength": max_length, **extra}


DATE_TIME: Schema = {"type": "string", "format": "date-time"}
NUMBER: Schema = {"type": "number"}
ANY_OBJECT: Schema = {"type": "object"}
