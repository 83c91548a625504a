"""How the OpenAPI document describes one operation: its parameters, JSON body and answers, its role, and the
problem responses (``RESPONSES``) every operation of its kind can give.
"""

from __future__ import annotations

from typing import Any

from cliffwatch.adapters.api.json_schema import Schema, ref

PROBLEM_JSON = "application/problem+json"


_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}, "required": True}}


def _problem(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": {PROBLEM_JSON: {"schema": ref("Problem")}}}
    if headers:
        response["headers"] = headers
    return response


RESPONSES: dict[str, Any] = {
    "BadRequest": _problem(
        "Invalid query parameters or header, malformed JSON, a body over the document limits "
        "(nesting, values, long numbers: body-too-complex), or a missing body."
    ),
    "Unauthenticated": _problem(
        "No bearer token, or an unknown or revoked one.",
        {"WWW-Authenticate": {"schema": {"type": "string"}, "required": True}},
    ),
    "Forbidden": _problem("The token's role is too low for this operation."),
    "NotFound": _problem("No such resource."),
    "TooLarge": _problem("The body is over the size limit (CLIFFWATCH_API_MAX_BODY_BYTES)."),
    "UnsupportedMedia": _problem("The body is not application/json."),
    "Unprocessable": _problem(
        "Well-formed, but breaks the rules (the body; for next fire times, a time zone this host lacks); "
        "`problems` lists each."
    ),
    "TooManyRequests": _problem(
        "Too many requests: this token's request rate is spent (CLIFFWATCH_API_RATE_PER_TOKEN, "
        "CLIFFWATCH_API_BURST_PER_TOKEN: rate-limited); on expensive endpoints, too many are in progress "
        "(CLIFFWATCH_API_MAX_EXPENSIVE: overloaded); on queueing a run or a sweep, the token's quota of queued runs "
        "or new scenario documents is reached (quota-exceeded). Retry after Retry-After seconds.",
        _RETRY_AFTER,
    ),
    "Unavailable": _problem(
        "Not now: the emergency stop is on, the database does not answer, or (readyz) this instance is not ready.",
        _RETRY_AFTER,
    ),
    "Error": _problem("An unexpected error; details are logged under the request_id, never shown."),
}


def _json(schema: Schema, description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def _param(name: str, where: str, schema: Schema, description: str) -> dict[str, Any]:
    """A parameter: required when in the path, optional everywhere else."""
    return {"name": name, "in": where, "required": where == "path", "schema": schema, "description": description}


def _op(
    summary: str,
    *,
    tag: str,
    role: str | None,
    ok: dict[str, Any],
    params: tuple[dict[str, Any], ...] = (),
    body: Schema | None = None,
    body_optional: bool = False,
    errors: tuple[int, ...] = (),
    description: str = "",
) -> dict[str, Any]:
    """One operation; the problem responses every operation of its kind can give are added here."""
    codes = set(errors)
    if role is not None:  # the public probes read no query; every other operation refuses unknown parameters
        # and counts against its token's request rate (429)
        codes |= {400, 401, 429} | ({403} if role != "viewer" else set())
    if body is not None:
        codes |= {413, 415, 422}
    names = {400: "BadRequest", 401: "Unauthenticated", 403: "Forbidden", 404: "NotFound", 413: "TooLarge",
             415: "UnsupportedMedia", 422: "Unprocessable", 429: "TooManyRequests", 503: "Unavailable"}  # fmt: skip
    responses = {**ok, **{str(c): {"$ref": f"#/components/responses/{names[c]}"} for c in sorted(codes)}}
    responses["default"] = {"$ref": "#/components/responses/Error"}
    operation: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": responses}
    if description:
        operation["description"] = description
    if params:
        operation["parameters"] = list(params)
    if body is not None:
        operation["requestBody"] = {"required": not body_optional, "content": {"application/json": {"schema": body}}}
    if role is None:
        operation["security"] = []
    else:
        operation["x-required-role"] = role
    return operation
