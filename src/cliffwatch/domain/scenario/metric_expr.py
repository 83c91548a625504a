"""A small expression language over Prometheus samples: which server figure a series plots, and how.

A scraped page is a set of samples (a sample name, its labels, a value). A series is one expression over
them, evaluated at every scrape; a counter's rate needs the scrape before. The grammar is a subset of
PromQL's look, without ranges (the window is the scrape interval):

    expr     := [aggr [by (label, ...)]] ( inner ) [(* | /) number]  |  inner [(* | /) number]
    aggr     := sum | avg | max | min                  (default: sum over every matching sample)
    inner    := rate(selector) | mean(selector) | selector
    selector := name [{label op "value", ...}]         (op: =  !=  =~  !~)

``rate(c)`` is the per-second increase of counter ``c`` between two scrapes (a value that fell is a reset:
the new value is the increase, as Prometheus reads it). ``mean(h)`` is the mean of a histogram or summary
``h`` over the interval: the increase of ``h_sum`` over that of ``h_count``, None when nothing was counted.
``sum by (model_name) (...)`` gives one value per distinct label value. Nothing here reads a clock: the
caller passes each scrape's time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

# A scrape, as the evaluator reads it: each sample name with its samples (labels, value).
Samples = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]
GroupKey = tuple[tuple[str, str], ...]  # the ``by`` labels' values of a group; () without ``by``

_NAME = r"[A-Za-z_:][A-Za-z0-9_:]*"
_TOKEN = re.compile(
    rf"""\s*(?:
        (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)
      | (?P<name>{_NAME})
      | (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<op>=~|!~|!=|=|[(){{}},*/])
    )""",
    re.VERBOSE,
)
MAX_EXPRESSION = 500  # characters: an expression is a line in a scenario, not a program


class Func(StrEnum):
    VALUE = "value"  # the samples' values as they are (gauges)
    RATE = "rate"  # per-second increase of a counter between scrapes
    MEAN = "mean"  # a histogram's or summary's mean over the interval (Δ_sum / Δ_count)


class Aggregation(StrEnum):
    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"


class MatchOp(StrEnum):
    EQ = "="
    NE = "!="
    RE = "=~"
    NRE = "!~"


@dataclass(frozen=True, kw_only=True)
class Matcher:
    label: str
    op: MatchOp
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.label, "")
        if self.op is MatchOp.EQ:
            return actual == self.value
        if self.op is MatchOp.NE:
            return actual != self.value
        found = re.fullmatch(self.value, actual) is not None  # anchored, as in PromQL
        return found if self.op is MatchOp.RE else not found

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.label}{self.op.value}"{escaped}"'


@dataclass(frozen=True, kw_only=True)
class Expr:
    """One parsed expression; ``text`` is its canonical form (what documents and evidence quote)."""

    metric: str
    func: Func = Func.VALUE
    matchers: tuple[Matcher, ...] = ()
    aggregation: Aggregation = Aggregation.SUM
    by: tuple[str, ...] = ()
    scale: float = 1.0

    @property
    def sample_names(self) -> tuple[str, ...]:
        """The sample names this expression reads (what a scrape must keep)."""
        if self.func is Func.MEAN:
            return (f"{self.metric}_sum", f"{self.metric}_count")
        return (self.metric,)

    @property
    def text(self) -> str:
        selector = self.metric + (f"{{{', '.join(str(m) for m in self.matchers)}}}" if self.matchers else "")
        inner = selector if self.func is Func.VALUE else f"{self.func.value}({selector})"
        if self.by:
            text = f"{self.aggregation.value} by ({', '.join(self.by)}) ({inner})"
        elif self.aggregation is not Aggregation.SUM:
            text = f"{self.aggregation.value}({inner})"
        else:
            text = inner
        if self.scale != 1.0:
            text += f" * {self.scale:.12g}" if self.scale >= 1 else f" / {1 / self.scale:.12g}"
        return text

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(m.matches(labels) for m in self.matchers)

    def present(self, samples: Samples) -> bool:
        """Whether the page carries a sample this expression selects."""
        return any(self.selects(labels) for labels, _ in samples.get(self.sample_names[0], ()))


class ExprInvalid(ValueError):
    """An expression that does not parse; the message says where and why (the scenario's parser quotes it)."""


def parse_expr(text: str) -> Expr:
    """The expression in ``text``; raises ``ExprInvalid`` naming what is wrong and where."""
    if len(text) > MAX_EXPRESSION:
        raise ExprInvalid(f"is longer than {MAX_EXPRESSION} characters")
    tokens = _tokens(text)
    parser = _Parser(tokens)
    expr = parser.expression()
    if not parser.at_end():
        raise ExprInvalid(f"unexpected {parser.peek_text()!r} after the expression")
    return expr


def _tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise ExprInvalid(f"cannot read {text[at:].strip()[:20]!r} (at character {at + 1})")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        at = match.end()
    return found


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.at = 0

    def at_end(self) -> bool:
        return self.at >= len(self.tokens)

    def peek_text(self) -> str:
        return self.tokens[self.at][1] if not self.at_end() else "the end"

    def take(self, kind: str, value: str | None = None) -> str:
        if self.at_end():
            raise ExprInvalid(f"ends early: expected {value or kind}")
        got_kind, got = self.tokens[self.at]
        if got_kind != kind or (value is not None and got != value):
            raise ExprInvalid(f"expected {value or kind}, got {got!r}")
        self.at += 1
        return got

    def accept(self, kind: str, value: str) -> bool:
        if not self.at_end() and self.tokens[self.at] == (kind, value):
            self.at += 1
            return True
        return False

    def expression(self) -> Expr:
        if self.at_end():
            raise ExprInvalid("is empty")
        kind, word = self.tokens[self.at]
        aggregation = Aggregation.SUM
        by: tuple[str, ...] = ()
        if kind == "name" and word in {a.value for a in Aggregation} and self._next_opens_call():
            self.at += 1
            aggregation = Aggregation(word)
            if self.accept("name", "by"):
                by = self._labels()
            self.take("op", "(")
            expr = self.inner()
            self.take("op", ")")
        else:
            expr = self.inner()
        scale = self._scale()
        return Expr(metric=expr.metric, func=expr.func, matchers=expr.matchers, aggregation=aggregation, by=by,
                    scale=scale)  # fmt: skip

    def _next_opens_call(self) -> bool:
        following = self.tokens[self.at + 1] if self.at + 1 < len(self.tokens) else None
        return following in (("op", "("), ("name", "by"))

    def _labels(self) -> tuple[str, ...]:
        self.take("op", "(")
        labels = [self.take("name")]
        while self.accept("op", ","):
            labels.append(self.take("name"))
        self.take("op", ")")
        return tuple(labels)

    def inner(self) -> Expr:
        name = self.take("name")
        if name in (Func.RATE.value, Func.MEAN.value) and self.accept("op", "("):
            selector = self.selector(self.take("name"))
            self.take("op", ")")
            return Expr(metric=selector.metric, func=Func(name), matchers=selector.matchers)
        return self.selector(name)

    def selector(self, name: str) -> Expr:
        matchers: list[Matcher] = []
        if self.accept("op", "{"):
            while not self.accept("op", "}"):
                if matchers:
                    self.take("op", ",")
                label = self.take("name")
                op = self.take("op")
                if op not in {m.value for m in MatchOp}:
                    raise ExprInvalid(f"expected =, !=, =~ or !~ after {label}, got {op!r}")
                value = _unquote(self.take("string"))
                if op in (MatchOp.RE.value, MatchOp.NRE.value):
                    try:
                        re.compile(value)
                    except re.error as exc:
                        raise ExprInvalid(f"{label}{op}: not a regular expression ({exc})") from None
                matchers.append(Matcher(label=label, op=MatchOp(op), value=value))
        return Expr(metric=name, matchers=tuple(matchers))

    def _scale(self) -> float:
        for op, invert in (("*", False), ("/", True)):
            if self.accept("op", op):
                number = float(self.take("number"))
                if not math.isfinite(number) or number <= 0:
                    raise ExprInvalid(f"the factor after {op} must be a positive number")
                return 1 / number if invert else number
        return 1.0


def _unquote(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted[1:-1])


@dataclass(frozen=True, kw_only=True)
class _Reading:
    """What one scrape gave an expression before aggregation: per label set, the raw sample values."""

    values: dict[GroupKey, tuple[float, float]]  # all labels → (value, or for mean: (sum, count))


def _label_key(labels: Mapping[str, str]) -> GroupKey:
    return tuple(sorted(labels.items()))


def _read(expr: Expr, samples: Samples) -> _Reading:
    values: dict[GroupKey, tuple[float, float]] = {}
    if expr.func is Func.MEAN:
        sums = {_label_key(lb): v for lb, v in samples.get(f"{expr.metric}_sum", ()) if expr.selects(lb)}
        counts = {_label_key(lb): v for lb, v in samples.get(f"{expr.metric}_count", ()) if expr.selects(lb)}
        for key, total in sums.items():
            if key in counts:
                values[key] = (total, counts[key])
    else:
        for labels, value in samples.get(expr.metric, ()):
            if expr.selects(labels) and math.isfinite(value):
                key = _label_key(labels)
                previous = values.get(key, (0.0, 0.0))[0]
                values[key] = (previous + value, 0.0)  # a repeated label set (no such page is valid) adds up
    return _Reading(values=values)


_AGGREGATE: dict[Aggregation, Callable[[list[float]], float]] = {
    Aggregation.SUM: math.fsum,
    Aggregation.AVG: lambda values: math.fsum(values) / len(values),
    Aggregation.MAX: max,
    Aggregation.MIN: min,
}


class ExprState:
    """Evaluates one expression scrape after scrape, remembering what a rate needs from the last one."""

    def __init__(self, expr: Expr) -> None:
        self.expr = expr
        self._last: tuple[float, _Reading] | None = None

    def evaluate(self, at_s: float, samples: Samples) -> dict[GroupKey, float]:
        """The expression's value per group at a scrape taken at ``at_s`` (seconds, any monotonic origin).

        Empty when the page had no matching sample, and for a rate or mean at the first scrape (it needs
        two); a group whose interval counted nothing (a mean with no new observation) is left out.
        """
        reading = _read(self.expr, samples)
        last, self._last = self._last, (at_s, reading)
        expr = self.expr
        per_label: dict[GroupKey, float | tuple[float, float]] = {}
        if expr.func is Func.VALUE:
            per_label = {key: value for key, (value, _) in reading.values.items()}
        else:
            if last is None or at_s <= last[0]:
                return {}
            elapsed = at_s - last[0]
            before = last[1].values
            for key, (value, count) in reading.values.items():
                if key not in before:
                    continue  # a series that just appeared: its increase before this scrape is unknown
                old_value, old_count = before[key]
                if expr.func is Func.RATE:
                    per_label[key] = _increase(old_value, value) / elapsed
                else:
                    per_label[key] = (_increase(old_value, value), _increase(old_count, count))
        return self._aggregate(per_label)

    def _aggregate(self, per_label: Mapping[GroupKey, float | tuple[float, float]]) -> dict[GroupKey, float]:
        expr = self.expr
        groups: dict[GroupKey, list[float | tuple[float, float]]] = {}
        for key, value in per_label.items():
            labels = dict(key)
            group = tuple((name, labels.get(name, "")) for name in expr.by)
            groups.setdefault(group, []).append(value)
        out: dict[GroupKey, float] = {}
        for group, values in groups.items():
            if expr.func is Func.MEAN:
                pairs = [v for v in values if isinstance(v, tuple)]
                count = math.fsum(c for _, c in pairs)
                if count > 0:
                    out[group] = math.fsum(s for s, _ in pairs) / count * expr.scale
                continue
            plain = [v for v in values if isinstance(v, float | int)]
            if plain:
                out[group] = _AGGREGATE[expr.aggregation](plain) * expr.scale
        return out


def _increase(before: float, after: float) -> float:
    """A counter's increase between two readings; a value that fell means the counter was reset."""
    return after - before if after >= before else after


def group_suffix(group: GroupKey) -> str:
    """How a ``by`` group is named after its series: ``{model_name="m"}``, empty without ``by``."""
    if not group:
        return ""
    return "{" + ",".join(f'{name}="{value}"' for name, value in group) + "}"


def needed_samples(exprs: Iterable[Expr]) -> frozenset[str]:
    """Every sample name some expression reads: a scrape need parse nothing else."""
    return frozenset(name for expr in exprs for name in expr.sample_names)
