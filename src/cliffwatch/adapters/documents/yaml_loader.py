"""YAML under ``DocumentLimits``: composed here from the parser's events (libyaml's when PyYAML has it),
without recursion, counting as it goes and stopping at the first value over a limit; then constructed as
JSON's values only.

PyYAML's own composer recurses once per level and knows no limits: a few hundred bytes of nested aliases
stand for billions of values once validation or hashing walks them as a tree (a "billion laughs"). Here an
alias counts as the values it stands for, and an alias inside the node it names (a cycle) is refused.
What comes out is JSON's data model: string keys only; ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs`` and
``!!timestamp`` refused and a plain ``2026-11-30`` read as text; no NaN or infinity; numbers of at most
``MAX_NUMBER_CHARS`` characters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml
import yaml.reader
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    Event,
    MappingStartEvent,
    ScalarEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from cliffwatch.adapters.documents.limits import (
    MAX_NUMBER_CHARS,
    DocumentInvalid,
    DocumentLimits,
    check_text,
    too_deep,
    too_long_number,
    too_many,
    utf8,
)

_YAML_TAG = "tag:yaml.org,2002:"
_KEY_TAGS = (f"{_YAML_TAG}str", f"{_YAML_TAG}merge")  # a merge key (<<) is the one key that is not a string
_NOT_JSON = ("binary", "set", "omap", "pairs", "timestamp")


def load_yaml(text: str | bytes, limits: DocumentLimits) -> Any:
    """The single YAML document in ``text`` as JSON values (None for an empty one).

    Raises ``DocumentInvalid`` for text over the size limit, not UTF-8, not YAML, outside JSON's data model,
    or over one of the limits; with the line and column whenever the parser knows them.
    """
    raw = utf8(text, limits)
    loader = None
    try:
        loader = _Loader(raw, limits)  # PyYAML's reader checks the first characters at once
        return loader.get_single_data()
    except DocumentInvalid:
        raise
    except yaml.MarkedYAMLError as exc:
        mark: Any = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed"
        # libyaml stops at 1,000 levels while it scans ahead, before the composer sees as many
        over = "maximum nesting depth" in problem
        reason = too_deep(limits) if over else f"not valid YAML: {problem}"
        if mark is None:
            raise DocumentInvalid(reason, over_limit=over) from exc
        raise DocumentInvalid(reason, line=mark.line + 1, column=mark.column + 1, over_limit=over) from exc
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow: an offset, no line
        raise DocumentInvalid(f"not valid YAML: {exc.reason} (at offset {exc.position})") from exc
    except yaml.YAMLError as exc:
        raise DocumentInvalid(f"not valid YAML: {exc}") from exc
    finally:
        if loader is not None:
            loader.dispose()


@dataclass(kw_only=True)
class _OpenNode:
    """A mapping or list being composed."""

    node: MappingNode | SequenceNode
    anchor: str | None
    counted_at_start: int  # the count of values so far, itself included
    height: int = 1  # collections nested in its subtree so far, itself included (a scalar's is 0)
    key: Node | None = None  # a mapping's key waiting for its value


@dataclass(frozen=True, kw_only=True)
class _Anchored:
    node: Node
    size: int  # values in its subtree, as a tree
    height: int  # as in ``_OpenNode``


class _BoundedComposer:
    """Composes a stream's single document from its parser's events (see the module's docstring)."""

    limits: DocumentLimits
    # From the parser it is mixed with (libyaml's CParser or PyYAML's Parser), and from the Resolver.
    get_event: Callable[[], Event]
    check_event: Callable[..., bool]
    resolve: Callable[[type[Node], Any, Any], str]

    def get_single_node(self) -> Node | None:
        self.get_event()  # the stream's start
        node = None
        if not self.check_event(StreamEndEvent):
            start = self.get_event()
            assert isinstance(start, DocumentStartEvent)
            node = self._compose_document()
            self.get_event()  # the document's end
        if not self.check_event(StreamEndEvent):
            raise _refused("expected a single document, but found another", self.get_event())
        self.get_event()
        return node

    def _compose_document(self) -> Node:
        limits = self.limits
        anchors: dict[str, _Anchored] = {}
        open_anchors: set[str] = set()  # of the collections being composed: an alias to one is a cycle
        stack: list[_OpenNode] = []
        counted = aliases = 0
        while True:
            event = self.get_event()
            anchor: str | None = None
            if isinstance(event, AliasEvent):
                assert event.anchor is not None
                aliases += 1
                if aliases > limits.max_aliases:
                    raise _over(f"has more than {limits.max_aliases:,} aliases", event)
                target = anchors.get(event.anchor)
                if target is None:
                    cycle = event.anchor in open_anchors
                    raise _refused("an alias refers to a node that contains it" if cycle
                                   else f"found undefined alias {event.anchor!r}", event)  # fmt: skip
                counted += target.size
                if counted > limits.max_nodes:
                    raise _over(f"aliases expand to more than {limits.max_nodes:,} values", event)
                if len(stack) + target.height > limits.max_depth:
                    raise _over(too_deep(limits), event)
                node, size, height = target.node, target.size, target.height
            elif isinstance(event, ScalarEvent | CollectionStartEvent):
                counted += 1
                if counted > limits.max_nodes:
                    raise _over(too_many(limits), event)
                anchor = event.anchor
                if anchor is not None and (anchor in anchors or anchor in open_anchors):
                    raise _refused(f"found a second anchor {anchor!r}", event)
                if isinstance(event, CollectionStartEvent):
                    if len(stack) + 1 > limits.max_depth:
                        raise _over(too_deep(limits), event)
                    stack.append(_OpenNode(node=self._collection(event), anchor=anchor, counted_at_start=counted))
                    if anchor is not None:
                        open_anchors.add(anchor)
                    continue
                node, size, height = self._scalar(event), 1, 0
            else:  # the end of the innermost collection
                done = stack.pop()
                node, anchor = done.node, done.anchor
                end: Any = event.end_mark  # libyaml's Mark or PyYAML's
                node.end_mark = end
                size, height = counted - done.counted_at_start + 1, done.height
                open_anchors.discard(anchor or "")
            if anchor is not None:
                anchors[anchor] = _Anchored(node=node, size=size, height=height)
            if not stack:
                return node
            _attach(stack[-1], node, height, event)

    def _scalar(self, event: ScalarEvent) -> ScalarNode:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(ScalarNode, event.value, event.implicit)
        reason = check_text(event.value)  # libyaml refuses surrogate escapes; PyYAML's own parser does not
        if reason is not None:
            raise _refused(reason, event)
        start: Any = event.start_mark
        end: Any = event.end_mark
        return ScalarNode(tag, event.value, start, end, style=event.style)

    def _collection(self, event: CollectionStartEvent) -> MappingNode | SequenceNode:
        kind: type[MappingNode | SequenceNode] = MappingNode if isinstance(event, MappingStartEvent) else SequenceNode
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(kind, None, event.implicit)
        start: Any = event.start_mark
        return kind(tag, [], start, None, flow_style=getattr(event, "flow_style", None))


def _attach(parent: _OpenNode, node: Node, height: int, event: Event) -> None:
    parent.height = max(parent.height, height + 1)
    if isinstance(parent.node, SequenceNode):
        parent.node.value.append(node)
    elif parent.key is None:
        if not isinstance(node, ScalarNode) or node.tag not in _KEY_TAGS:
            got = repr(node.value) if isinstance(node, ScalarNode) else (
                "a list" if isinstance(node, SequenceNode) else "a mapping")  # fmt: skip
            raise _refused(f"a mapping key must be a string, got {got} (quote it to make it one)", node)
        parent.key = node
    else:
        parent.node.value.append((parent.key, node))
        parent.key = None


def _refused(reason: str, where: Node | Event, *, over_limit: bool = False) -> DocumentInvalid:
    mark: Any = where.start_mark
    return DocumentInvalid(reason, line=mark.line + 1, column=mark.column + 1, over_limit=over_limit)


def _over(reason: str, where: Node | Event) -> DocumentInvalid:
    return _refused(reason, where, over_limit=True)


class _JsonValues(SafeConstructor):
    """PyYAML's safe constructor, making JSON's values only (see the module's docstring)."""

    def construct_bounded_int(self, node: ScalarNode) -> int:
        _number_length(node)
        value: int = _explicit(self.construct_yaml_int, node)
        return value

    def construct_finite_float(self, node: ScalarNode) -> float:
        _number_length(node)
        value: float = _explicit(self.construct_yaml_float, node)
        if not math.isfinite(value):
            raise _refused(f"{node.value} is not a finite number", node)
        return value

    def construct_checked_bool(self, node: ScalarNode) -> bool:
        value: bool = _explicit(self.construct_yaml_bool, node)
        return value

    def construct_not_json(self, node: Node) -> None:
        tag = node.tag.replace(_YAML_TAG, "!!")
        raise _refused(f"the tag {tag} is not allowed: documents hold JSON values only", node)

    yaml_constructors: ClassVar[dict[Any, Any]] = {
        **SafeConstructor.yaml_constructors,
        f"{_YAML_TAG}int": construct_bounded_int,
        f"{_YAML_TAG}float": construct_finite_float,
        f"{_YAML_TAG}bool": construct_checked_bool,
        **dict.fromkeys((f"{_YAML_TAG}{name}" for name in _NOT_JSON), construct_not_json),
    }


def _explicit(construct: Any, node: ScalarNode) -> Any:
    """``construct(node)``, its value refused with its place when it is not one: an implicit scalar always is
    (the resolver matched it), but an explicit tag (``!!int abc``, ``!!bool maybe``) makes PyYAML's constructors
    raise ``ValueError``, ``KeyError`` or ``IndexError`` on whatever follows it."""
    try:
        return construct(node)
    except (ValueError, KeyError, IndexError) as exc:
        tag = node.tag.replace(_YAML_TAG, "!!")
        raise _refused(f"{node.value!r} is not a valid {tag}", node) from exc


def _number_length(node: ScalarNode) -> None:
    if len(node.value) > MAX_NUMBER_CHARS:
        raise _over(too_long_number(), node)


class _JsonResolver(Resolver):
    """YAML 1.1's implicit types, less timestamps: an unquoted date stays the text it is."""

    yaml_implicit_resolvers = {  # noqa: RUF012  (PyYAML's class-level table, never changed)
        first: [(tag, pattern) for tag, pattern in resolvers if tag != f"{_YAML_TAG}timestamp"]
        for first, resolvers in Resolver.yaml_implicit_resolvers.items()
    }


class _PureLoader(_BoundedComposer, Reader, Scanner, Parser, _JsonValues, _JsonResolver):
    """PyYAML's own parser under the composer: what is used when PyYAML was built without libyaml."""

    def __init__(self, raw: bytes, limits: DocumentLimits) -> None:
        Reader.__init__(self, raw)
        Scanner.__init__(self)
        Parser.__init__(self)
        _JsonValues.__init__(self)
        _JsonResolver.__init__(self)
        self.limits = limits


_Loader: type[_PureLoader] | type[_CLoader] = _PureLoader
try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built from source without libyaml
    pass
else:

    class _CLoader(_BoundedComposer, CParser, _JsonValues, _JsonResolver):
        """libyaml's parser (about five times faster) under the composer."""

        def __init__(self, raw: bytes, limits: DocumentLimits) -> None:
            CParser.__init__(self, raw)
            _JsonValues.__init__(self)
            _JsonResolver.__init__(self)
            self.limits = limits

    _Loader = _CLoader
