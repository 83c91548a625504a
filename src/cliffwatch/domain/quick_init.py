"""Faster ``__init__`` for the frozen dataclasses made once per request (attempts, records, planned requests).

A frozen dataclass's generated ``__init__`` writes each field through ``object.__setattr__``: about 80 ns a
field, so 2.2 µs for an ``Attempt`` of 17 fields, several times a request on the load path. ``quick_init``
replaces it with one that writes the same fields, with the same defaults, without that detour: into the
instance's ``__dict__`` (a class without slots) or through each slot's descriptor. Nothing else changes: the
class is still frozen (assigning a field raises), compares, hashes, prints and pickles as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, cast

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Gives a frozen dataclass (applied after ``@dataclass``) the fast ``__init__``; same signature."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"{cls.__name__}: quick_init is for frozen dataclasses")
    slotted = "__slots__" in cls.__dict__
    namespace: dict[str, Any] = {"_MISSING": dataclasses.MISSING}
    signature: list[str] = []
    keyword_only = False
    lines: list[str] = ["    d = self.__dict__"] if not slotted else []
    for field in dataclasses.fields(cast(Any, cls)):
        name = field.name
        if field.init:
            if field.kw_only and not keyword_only:
                signature.append("*")
                keyword_only = True
            if field.default is not dataclasses.MISSING:
                namespace[f"_d_{name}"] = field.default
                signature.append(f"{name}=_d_{name}")
            elif field.default_factory is not dataclasses.MISSING:
                namespace[f"_f_{name}"] = field.default_factory
                signature.append(f"{name}=_MISSING")
                lines.append(f"    if {name} is _MISSING: {name} = _f_{name}()")
            else:
                signature.append(name)
            value = name
        elif field.default is not dataclasses.MISSING:
            namespace[f"_d_{name}"] = field.default
            value = f"_d_{name}"
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_f_{name}"] = field.default_factory
            value = f"_f_{name}()"
        else:
            continue  # init=False without a default: set by __post_init__, as dataclass leaves it
        if slotted:
            namespace[f"_s_{name}"] = cls.__dict__[name].__set__
            lines.append(f"    _s_{name}(self, {value})")
        else:
            lines.append(f"    d[{name!r}] = {value}")
    if hasattr(cls, "__post_init__"):
        lines.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(signature)}):\n" + "\n".join(lines or ["    pass"]) + "\n"
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
