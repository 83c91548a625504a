"""``quick_init``: the same construction as the dataclass's own ``__init__``, only faster."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from cliffwatch.domain.quick_init import quick_init


@quick_init
@dataclass(frozen=True, kw_only=True)
class Plain:
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: int = field(default=4, init=False)


@quick_init
@dataclass(frozen=True, slots=True)
class Slotted:
    a: int
    b: tuple[int, ...] = ()


@quick_init
@dataclass(frozen=True, kw_only=True)
class Checked:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n must be >= 0")


def test_fields_defaults_and_factories_are_the_dataclass_s() -> None:
    one, two = Plain(a=1), Plain(a=1)
    assert (one.a, one.b, one.c, one.d) == (1, "b", [], 4)
    assert one.c is not two.c  # a fresh list each, as default_factory makes
    assert Plain(a=2, b="x", c=[3]) == Plain(a=2, b="x", c=[3])
    assert repr(Plain(a=1)) == "Plain(a=1, b='b', c=[], d=4)"


def test_it_stays_frozen_and_pickles() -> None:
    value = Plain(a=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.a = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(value)) == value
    slotted = Slotted(1, (2,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        slotted.a = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(slotted)) == slotted
    assert hash(slotted) == hash(Slotted(1, (2,)))


def test_the_signature_is_kept() -> None:
    with pytest.raises(TypeError, match="a"):
        Plain()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Plain(1)  # type: ignore[call-arg]  # keyword-only, as declared
    with pytest.raises(TypeError):
        Plain(a=1, d=5)  # type: ignore[call-arg]  # init=False
    assert Slotted(1) == Slotted(a=1, b=())


def test_post_init_still_runs() -> None:
    with pytest.raises(ValueError, match="n must be"):
        Checked(n=-1)


def test_only_frozen_dataclasses_are_taken() -> None:
    with pytest.raises(TypeError, match="frozen"):

        @quick_init
        @dataclass
        class Mutable:
            a: int
