"""Fault declarations: Toxiproxy proxies a scenario routes through, and the toxics a phase switches on.

Only the model and its validation live here; applying toxics is the Toxiproxy adapter's job. Attribute
names and units are Toxiproxy's own (v2.12), so a toxic reads the same here as in its documentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from cliffwatch.domain.validation import Problems, Reader, short_repr


class ToxicType(StrEnum):
    LATENCY = "latency"
    BANDWIDTH = "bandwidth"
    TIMEOUT = "timeout"
    RESET_PEER = "reset_peer"
    SLOW_CLOSE = "slow_close"
    SLICER = "slicer"
    LIMIT_DATA = "limit_data"


class Stream(StrEnum):
    UPSTREAM = "upstream"
    DOWNSTREAM = "downstream"


# name → (required, default when optional); units as Toxiproxy documents them.
TOXIC_ATTRIBUTES: Mapping[ToxicType, Mapping[str, tuple[bool, int]]] = {
    ToxicType.LATENCY: {"latency": (True, 0), "jitter": (False, 0)},  # ms
    ToxicType.BANDWIDTH: {"rate": (True, 0)},  # KB/s
    ToxicType.TIMEOUT: {"timeout": (True, 0)},  # ms; 0 holds the data until the toxic is removed
    ToxicType.RESET_PEER: {"timeout": (False, 0)},  # ms before the reset
    ToxicType.SLOW_CLOSE: {"delay": (True, 0)},  # ms
    # Toxiproxy's slicer calls rand.Intn(2 × size_variation), which panics at 0 (and takes the proxy
    # down); chunks can go negative unless size_variation < average_size. So both are required.
    ToxicType.SLICER: {
        "average_size": (True, 0),
        "size_variation": (True, 0),
        "delay": (False, 0),
    },  # bytes, µs
    ToxicType.LIMIT_DATA: {"bytes": (True, 0)},
}


@dataclass(frozen=True, kw_only=True)
class ProxySpec:
    """A Toxiproxy proxy: ``listen`` is host:port (port 0: any free one); ``upstream`` defaults to the target."""

    name: str
    listen: str
    upstream: str | None


@dataclass(frozen=True, kw_only=True)
class FaultSpec:
    proxy: str
    type: ToxicType
    stream: Stream
    toxicity: float
    attributes: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        attrs = ", ".join(f"{k}={v}" for k, v in sorted(self.attributes.items()))
        return f"{self.type.value}({attrs}) on {self.proxy} {self.stream.value}"


def parse_proxy(value: object, path: str, problems: Problems) -> ProxySpec | None:
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    name = reader.string("name")
    listen = reader.string("listen", "127.0.0.1:0")
    upstream = reader.string("upstream", None)
    for key, address in (("listen", listen), ("upstream", upstream)):
        if address is not None and not _is_host_port(address):
            reader.error(key, f"must be host:port, got {short_repr(address)}")
            listen = None if key == "listen" else listen
            upstream = None if key == "upstream" else upstream
    reader.done()
    if name is None or listen is None or (reader.has("upstream") and upstream is None):
        return None
    return ProxySpec(name=name, listen=listen, upstream=upstream)


def parse_fault(value: object, path: str, problems: Problems) -> FaultSpec | None:
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    proxy = reader.string("proxy")
    kind = reader.string("type", choices=tuple(t.value for t in ToxicType))
    stream = reader.string("stream", Stream.DOWNSTREAM.value, choices=tuple(s.value for s in Stream))
    toxicity = reader.number("toxicity", 1.0, ge=0, le=1)
    attributes: dict[str, int] | None = None
    attrs_reader = Reader.of(reader.raw("attributes", {}), reader.child("attributes"), reader.problems)
    if kind is not None and attrs_reader is not None:
        parsed = {
            name: attrs_reader.number(name, ge=0, integer=True)
            if required
            else attrs_reader.number(name, default, ge=0, integer=True)
            for name, (required, default) in TOXIC_ATTRIBUTES[ToxicType(kind)].items()
        }
        if all(v is not None for v in parsed.values()):
            attributes = {k: int(v) for k, v in parsed.items()}
            if kind == ToxicType.BANDWIDTH and attributes["rate"] <= 0:
                attrs_reader.error("rate", "must be > 0")
                attributes = None
            elif kind == ToxicType.SLICER and not 0 < attributes["size_variation"] < attributes["average_size"]:
                average = attributes["average_size"]
                attrs_reader.error("size_variation", f"must be > 0 and < average_size ({average})")
                attributes = None
        attrs_reader.done()
    elif attrs_reader is not None:
        for key in attrs_reader.data:
            attrs_reader.raw(key, None)
    reader.done()
    if None in (proxy, kind, stream, toxicity) or attributes is None:
        return None
    return FaultSpec(
        proxy=proxy,
        type=ToxicType(kind),
        stream=Stream(stream),
        toxicity=float(toxicity),
        attributes=attributes,
    )


def _is_host_port(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    # isdigit() alone accepts "²" and other Unicode digits, which int() then rejects
    return bool(sep and host and port.isascii() and port.isdigit() and int(port) <= 65535)


TOXIC_PREFIX = "cliffwatch"


def toxic_name(run_id: str, phase: int, index: int, kind: ToxicType) -> str:
    """The name of a toxic cliffwatch creates: recognisable by its prefix, traceable to its run and phase."""
    return f"{TOXIC_PREFIX}-{run_id}-p{phase}-{index}-{kind.value}"


def run_of_toxic(name: str) -> str | None:
    """The run id in one of our toxic names, or None when the name is not one of ours."""
    prefix = f"{TOXIC_PREFIX}-"
    if not name.startswith(prefix):
        return None
    run_id, sep, _ = name[len(prefix) :].rpartition("-p")
    return run_id if sep and run_id else None


@dataclass(frozen=True, kw_only=True)
class ToxicState:
    """A toxic as Toxiproxy reports it (or as we ask for it)."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, fault: FaultSpec, name: str) -> ToxicState:
        return cls(
            name=name,
            type=fault.type.value,
            stream=fault.stream.value,
            toxicity=fault.toxicity,
            attributes=dict(fault.attributes),
        )


_HOST_ALIASES = {"localhost": {"127.0.0.1", "[::1]", "::1"}, "0.0.0.0": {"[::]", "::"}, "": {"[::]", "::"}}


def proxy_matches(proxy: ProxyState, *, listen: str, upstream: str) -> bool:
    """Whether an existing proxy is the one asked for: same upstream, and same listen unless port 0 was asked.

    Anything else belongs to someone else and must be left alone.
    """
    if proxy.upstream != upstream:
        return False
    host, _, port = listen.rpartition(":")
    if port == "0":
        return True
    actual_host, _, actual_port = proxy.listen.rpartition(":")
    return actual_port == port and (actual_host == host or actual_host in _HOST_ALIASES.get(host, set()))


@dataclass(frozen=True, kw_only=True)
class ProxyState:
    """A proxy as Toxiproxy reports it: ``listen`` is the address actually bound (port 0 resolved)."""

    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: tuple[ToxicState, ...] = ()


@dataclass(frozen=True, kw_only=True)
class FaultEvent:
    """A fault switched on or off, at run-relative time: the fault band a report draws."""

    phase: int
    fault: FaultSpec
    action: str  # "on" or "off"
    at_ns: int  # an injector stamps ``Clock.now_ns()``; the runner makes it relative to the run's start
    ok: bool
    detail: str = ""
