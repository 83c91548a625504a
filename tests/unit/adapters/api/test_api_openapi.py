"""The OpenAPI document: a valid OpenAPI 3.1 document whose schemas are valid JSON Schema 2020-12, served at
/api/v1/openapi.json, naming exactly the app's routes with the roles and limits the app applies.

That real responses match it is checked on every response of every API test (``api_harness.assert_conforms``)
and by the schemathesis run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from api_harness import DOCUMENT, Api, make_settings
from schemathesis.specs.openapi.definitions import OPENAPI_31  # the official 3.1 schema, as schemathesis ships it

from cliffwatch.adapters.api.app import ROUTE_TABLE, create_app
from cliffwatch.adapters.api.problems import ERRORS
from cliffwatch.domain import errors
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.outcomes import Outcome
from cliffwatch.domain.service.runs import TokenRole


def _schemas(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema in the document: components, parameters, bodies and responses."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "schema" and isinstance(value, dict):
                yield f"{where}/schema", value
            elif key == "schemas" and where == "/components":
                yield from ((f"{where}/schemas/{name}", schema) for name, schema in value.items())
            else:
                yield from _schemas(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _schemas(item, f"{where}/{index}")


def test_the_document_is_valid_openapi_3_1() -> None:
    jsonschema.Draft202012Validator(OPENAPI_31).validate(DOCUMENT)
    assert DOCUMENT["openapi"] == "3.1.0"


@pytest.mark.parametrize(("where", "schema"), list(_schemas(DOCUMENT)), ids=[w for w, _ in _schemas(DOCUMENT)])
def test_every_schema_is_valid_json_schema_2020_12(where: str, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)


def test_every_reference_resolves_and_every_component_is_used() -> None:
    text = str(DOCUMENT)
    for kind, names in DOCUMENT["components"].items():
        for name in names:
            assert f"#/components/{kind}/{name}" in text or kind == "securitySchemes", f"{kind}/{name} is unused"
    refs: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            refs.extend(v for k, v in node.items() if k == "$ref")
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)

    collect(DOCUMENT)
    for ref in refs:
        _, components, kind, name = ref.split("/")
        assert name in DOCUMENT[components][kind], ref


async def test_the_document_names_exactly_the_apps_routes_with_their_roles(api: Api) -> None:
    served = {(r.method, r.resource.canonical) for r in api.client.app.router.routes() if r.resource is not None}
    documented = {(m.upper(), p) for p, item in DOCUMENT["paths"].items() for m in item}
    assert served == documented
    for route in ROUTE_TABLE:
        operation = DOCUMENT["paths"][route.path][route.method.lower()]
        if route.role is None:
            assert operation["security"] == []
            assert "x-required-role" not in operation
        else:
            assert operation["x-required-role"] == route.role.value
            assert "401" in operation["responses"]
            assert ("403" in operation["responses"]) == (route.role is not TokenRole.VIEWER)
        assert ("429" in operation["responses"]) == (route.role is not None)  # the token's rate, and more
        assert "requestBody" not in operation or "413" in operation["responses"]


async def test_the_document_is_served_to_viewers(api: Api) -> None:
    reply = await api.call("GET", "/api/v1/openapi.json", role=TokenRole.VIEWER)
    assert reply.body == DOCUMENT


def test_the_app_refuses_an_expensive_limit_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        create_app(None, settings=make_settings(api_max_expensive=0))  # type: ignore[arg-type]


def _cliffwatch_errors() -> list[type[CliffwatchError]]:
    return [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, CliffwatchError) and value is not CliffwatchError
    ]


@pytest.mark.parametrize("error", _cliffwatch_errors(), ids=lambda e: e.__name__)
def test_every_cliffwatch_error_has_a_status(error: type[CliffwatchError]) -> None:
    assert error in ERRORS
    mapping = ERRORS[error]
    assert 400 <= mapping.status <= 599
    documented = {int(code) for item in DOCUMENT["paths"].values() for op in item.values()
                  for code in op["responses"] if code.isdigit()}  # fmt: skip
    assert mapping.status in documented | {500, 502}  # 5xx beyond the documented ones fall under "default"


def test_an_outcomes_class_is_one_of_the_domains_redirect_included() -> None:
    """The document's outcome enum is the domain's outcome classes, so a redirect record conforms."""
    page = DOCUMENT["components"]["schemas"]["OutcomePage"]
    enum = page["properties"]["outcomes"]["items"]["properties"]["outcome"]["enum"]
    assert enum == [o.value for o in Outcome]
    assert "redirect" in enum
