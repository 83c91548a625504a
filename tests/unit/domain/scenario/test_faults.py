"""Fault declarations: each Toxiproxy toxic's attributes and bounds, and proxy addresses."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.scenario.faults import (
    TOXIC_ATTRIBUTES,
    FaultSpec,
    ProxySpec,
    Stream,
    ToxicType,
    parse_fault,
    parse_proxy,
)
from cliffwatch.domain.validation import Problems


def _fault(value: object) -> tuple[FaultSpec | None, list[str]]:
    problems = Problems()
    result = parse_fault(value, "f", problems)
    return result, [str(p) for p in problems.items]


def _proxy(value: object) -> tuple[ProxySpec | None, list[str]]:
    problems = Problems()
    result = parse_proxy(value, "p", problems)
    return result, [str(p) for p in problems.items]


@pytest.mark.parametrize(
    ("type_", "given", "attributes"),
    [
        ("latency", {"latency": 250}, {"latency": 250, "jitter": 0}),
        ("latency", {"latency": 250, "jitter": 40}, {"latency": 250, "jitter": 40}),
        ("bandwidth", {"rate": 64}, {"rate": 64}),
        ("timeout", {"timeout": 0}, {"timeout": 0}),
        ("timeout", {"timeout": 1500}, {"timeout": 1500}),
        ("reset_peer", {}, {"timeout": 0}),
        ("reset_peer", {"timeout": 100}, {"timeout": 100}),
        ("slow_close", {"delay": 500}, {"delay": 500}),
        ("slicer", {"average_size": 64, "size_variation": 32}, {"average_size": 64, "size_variation": 32, "delay": 0}),
        (
            "slicer",
            {"average_size": 2, "size_variation": 1, "delay": 10},
            {"average_size": 2, "size_variation": 1, "delay": 10},
        ),
        ("limit_data", {"bytes": 0}, {"bytes": 0}),
        ("limit_data", {"bytes": 1024.0}, {"bytes": 1024}),
    ],
)
def test_each_toxic_takes_its_attributes_with_optional_ones_defaulted(
    type_: str, given: dict[str, Any], attributes: dict[str, int]
) -> None:
    fault, problems = _fault({"proxy": "llm", "type": type_, "attributes": given})

    assert problems == []
    assert fault == FaultSpec(
        proxy="llm", type=ToxicType(type_), stream=Stream.DOWNSTREAM, toxicity=1.0, attributes=attributes
    )
    assert all(type(v) is int for v in fault.attributes.values())


def test_every_toxic_type_declares_its_attributes() -> None:
    assert set(TOXIC_ATTRIBUTES) == set(ToxicType)


def test_stream_and_toxicity_are_read_when_given() -> None:
    fault, problems = _fault({"proxy": "llm", "type": "reset_peer", "stream": "upstream", "toxicity": 0.25})

    assert problems == []
    assert fault is not None
    assert (fault.stream, fault.toxicity) == (Stream.UPSTREAM, 0.25)


def test_describe_names_the_toxic_its_attributes_and_where_it_applies() -> None:
    fault, _ = _fault({"proxy": "llm", "type": "latency", "attributes": {"latency": 300, "jitter": 20}})

    assert fault is not None
    assert fault.describe() == "latency(jitter=20, latency=300) on llm downstream"


_TOXICS = "latency, bandwidth, timeout, reset_peer, slow_close, slicer, limit_data"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("latency", ["f: must be a mapping, got a string"]),
        ({"type": "latency", "attributes": {"latency": 1}}, ["f.proxy: is required"]),
        ({"proxy": "llm", "attributes": {"latency": 1}}, ["f.type: is required"]),
        # with no valid type, its attributes cannot be judged, so only the type is reported
        (
            {"proxy": "llm", "type": "jitter", "attributes": {"x": 1}},
            [f"f.type: must be one of {_TOXICS}; got 'jitter'"],
        ),
        ({"proxy": "llm", "type": "latency"}, ["f.attributes.latency: is required"]),
        ({"proxy": "llm", "type": "latency", "attributes": {}}, ["f.attributes.latency: is required"]),
        ({"proxy": "llm", "type": "latency", "attributes": {"latency": -1}}, ["f.attributes.latency: must be >= 0"]),
        (
            {"proxy": "llm", "type": "latency", "attributes": {"latency": 1.5}},
            ["f.attributes.latency: must be a whole number, got 1.5"],
        ),
        (
            {"proxy": "llm", "type": "latency", "attributes": {"latency": "100ms"}},
            ["f.attributes.latency: must be a number, got a string"],
        ),
        (
            {"proxy": "llm", "type": "latency", "attributes": {"latency": 1, "rate": 5}},
            ["f.attributes.rate: unknown key"],
        ),
        ({"proxy": "llm", "type": "latency", "attributes": [1]}, ["f.attributes: must be a mapping, got a list"]),
        ({"proxy": "llm", "type": "latency", "attributes": None}, ["f.attributes: must be a mapping, got null"]),
        ({"proxy": "llm", "type": "bandwidth", "attributes": {"rate": 0}}, ["f.attributes.rate: must be > 0"]),
        (
            {"proxy": "llm", "type": "timeout", "attributes": {"latency": 5}},
            [
                "f.attributes.timeout: is required",
                "f.attributes.latency: unknown key",
            ],
        ),
        ({"proxy": "llm", "type": "slow_close"}, ["f.attributes.delay: is required"]),
        ({"proxy": "llm", "type": "limit_data", "attributes": {"bytes": -5}}, ["f.attributes.bytes: must be >= 0"]),
        (
            {"proxy": "llm", "type": "slicer", "attributes": {"size_variation": 1}},
            ["f.attributes.average_size: is required"],
        ),
        # Toxiproxy's slicer panics when size_variation is 0 and misbehaves unless it is below average_size
        (
            {"proxy": "llm", "type": "slicer", "attributes": {"average_size": 64}},
            ["f.attributes.size_variation: is required"],
        ),
        (
            {"proxy": "llm", "type": "slicer", "attributes": {"average_size": 64, "size_variation": 0}},
            ["f.attributes.size_variation: must be > 0 and < average_size (64)"],
        ),
        (
            {"proxy": "llm", "type": "slicer", "attributes": {"average_size": 64, "size_variation": 64}},
            ["f.attributes.size_variation: must be > 0 and < average_size (64)"],
        ),
        (
            {"proxy": "llm", "type": "slicer", "attributes": {"average_size": 0, "size_variation": 0}},
            ["f.attributes.size_variation: must be > 0 and < average_size (0)"],
        ),
        (
            {"proxy": "llm", "type": "reset_peer", "stream": "both"},
            ["f.stream: must be one of upstream, downstream; got 'both'"],
        ),
        ({"proxy": "llm", "type": "reset_peer", "toxicity": 1.5}, ["f.toxicity: must be <= 1"]),
        ({"proxy": "llm", "type": "reset_peer", "toxicity": -0.1}, ["f.toxicity: must be >= 0"]),
        ({"proxy": "llm", "type": "reset_peer", "toxicity": "half"}, ["f.toxicity: must be a number, got a string"]),
        ({"proxy": "llm", "type": "reset_peer", "name": "x"}, ["f.name: unknown key"]),
    ],
)
def test_an_invalid_fault_is_reported_with_its_path(value: object, expected: list[str]) -> None:
    assert _fault(value)[1] == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"name": "llm"}, ProxySpec(name="llm", listen="127.0.0.1:0", upstream=None)),
        ({"name": "llm", "listen": "0.0.0.0:8474"}, ProxySpec(name="llm", listen="0.0.0.0:8474", upstream=None)),
        (
            {"name": "llm", "listen": "[::1]:0", "upstream": "inference.internal:65535"},
            ProxySpec(name="llm", listen="[::1]:0", upstream="inference.internal:65535"),
        ),
    ],
)
def test_a_proxy_parses_with_its_listen_default(value: dict[str, Any], expected: ProxySpec) -> None:
    assert _proxy(value) == (expected, [])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({}, ["p.name: is required"]),
        ({"name": "llm", "listen": "localhost"}, ["p.listen: must be host:port, got 'localhost'"]),
        ({"name": "llm", "listen": ":8080"}, ["p.listen: must be host:port, got ':8080'"]),
        ({"name": "llm", "listen": "localhost:"}, ["p.listen: must be host:port, got 'localhost:'"]),
        ({"name": "llm", "listen": "localhost:65536"}, ["p.listen: must be host:port, got 'localhost:65536'"]),
        ({"name": "llm", "listen": "localhost:-1"}, ["p.listen: must be host:port, got 'localhost:-1'"]),
        ({"name": "llm", "listen": "localhost:²"}, ["p.listen: must be host:port, got 'localhost:²'"]),
        ({"name": "llm", "listen": "localhost:٨٠"}, ["p.listen: must be host:port, got 'localhost:٨٠'"]),
        ({"name": "llm", "upstream": "http://x:80/"}, ["p.upstream: must be host:port, got 'http://x:80/'"]),
        ({"name": "llm", "upstream": 8080}, ["p.upstream: must be a string, got a number"]),
        (
            {"name": "llm", "listen": "nowhere", "upstream": "nothing"},
            ["p.listen: must be host:port, got 'nowhere'", "p.upstream: must be host:port, got 'nothing'"],
        ),
        ({"name": "llm", "port": 80}, ["p.port: unknown key"]),
    ],
)
def test_an_invalid_proxy_is_reported_with_its_path(value: object, expected: list[str]) -> None:
    assert _proxy(value)[1] == expected
