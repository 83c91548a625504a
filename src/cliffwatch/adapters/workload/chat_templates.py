"""A tokenizer's chat template, compiled and rendered in Jinja's sandbox within bounds.

The template comes with the tokenizer a scenario names, so whoever may submit a scenario wrote it. Jinja's
sandbox (as transformers uses it) keeps it from reaching Python's internals, not from taking time or memory:
``{% for i in range(100000) %}{% for j in range(100) %}…`` or ``'a' * 10**8`` are allowed there. So each render
here is bounded:

- in size: ``*``, ``**`` and ``%`` are intercepted, and every call and filter has its integer arguments (a width,
  a count) and its answer checked against ``template_max_chars`` before anything that large is built; the
  output is counted as it is produced;
- in time: the preparation's :class:`~cliffwatch.adapters.workload.bounds.Watchdog` gives each render
  ``template_render_s``, and ends a render past it wherever it is (a loop with nothing to intercept included).

A render the sandbox refuses (``SecurityError``), one that fails, or one past a bound is a
``TokenizerUnavailable`` naming the file and what happened, never the template's text.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterator
from typing import Any

from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from cliffwatch.adapters.workload.bounds import BoundExceeded, Watchdog
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.workload.prepared import PreparationLimits

_WIDE_FORMAT = re.compile(r"\d{7,}")  # a width or precision of a million or more in a format string
_BINOPS = {"*": operator.mul, "**": operator.pow, "%": operator.mod}


class TemplateRefused(CliffwatchError):
    """A chat template that cannot be used: ``reason`` says why, never quoting the template."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class _TooLarge(Exception):
    pass


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox whose calls, filters and arithmetic cannot build more than ``max_chars``."""

    intercepted_binops = frozenset(_BINOPS)

    def __init__(self, *, max_chars: int) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True)
        self.max_chars = max_chars
        self.filters = {name: self._bounded(f) for name, f in self.filters.items()}

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and _magnitude(right) > 64 and _magnitude(left) > 1:
            raise _TooLarge(f"a power of more than 64 (the template's {operator})")
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                if isinstance(sequence, str | list | tuple) and isinstance(count, int):
                    self._within(len(sequence) * max(count, 0))
        if operator == "%" and isinstance(left, str):
            self._format_within(left)
        return self._checked(_BINOPS[operator](left, right))

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self._arguments_within(args, kwargs)
        if getattr(__obj, "__name__", None) in ("format", "format_map") and isinstance(
            getattr(__obj, "__self__", None), str
        ):
            __self._format_within(__obj.__self__)
        if getattr(__obj, "__name__", None) == "replace" and isinstance(getattr(__obj, "__self__", None), str):
            __self._replace_within(__obj.__self__, *args[:2])
        return __self._checked(super().call(__context, __obj, *args, **kwargs))

    def _bounded(self, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            self._arguments_within(args[1:], kwargs)  # the first is the value filtered (or the context)
            if function.__name__ == "do_replace" and len(args) >= 4 and isinstance(args[1], str):
                self._replace_within(args[1], args[2], args[3])
            if function.__name__ == "do_format" and args and isinstance(args[0], str):
                self._format_within(args[0])
            return self._checked(function(*args, **kwargs))

        return bounded

    def _arguments_within(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.max_chars:
                raise _TooLarge("a call with a number beyond the output bound")

    def _format_within(self, text: str) -> None:
        if _WIDE_FORMAT.search(text):
            raise _TooLarge("a format of a width beyond the output bound")

    def _replace_within(self, text: str, old: Any, new: Any) -> None:
        if isinstance(old, str) and isinstance(new, str) and len(new) > len(old):
            count = text.count(old) if old else len(text) + 1
            self._within(len(text) + count * (len(new) - len(old)))

    def _checked(self, value: Any) -> Any:
        if isinstance(value, str | list | tuple | dict):
            self._within(len(value))
        return value

    def _within(self, size: int) -> None:
        if size > self.max_chars:
            raise _TooLarge(f"something of more than {self.max_chars:,} characters or items")


def _magnitude(value: Any) -> float:
    return abs(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


class ChatTemplate:
    """A compiled chat template, rendered within ``limits`` (under ``watchdog``'s time bound when given)."""

    def __init__(self, source: str, *, limits: PreparationLimits, watchdog: Watchdog | None = None) -> None:
        self.limits = limits
        self.watchdog = watchdog
        self._environment = BoundedSandbox(max_chars=limits.template_max_chars)
        try:
            self._template = self._environment.from_string(source)
        except Exception as exc:  # a template Jinja cannot compile; its message names a line, never the text
            raise TemplateRefused(f"its chat_template does not compile ({type(exc).__name__})") from exc

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a chat template stays where it was prepared")  # never sent to a generator worker

    def render(self, **variables: Any) -> str:
        """The template rendered; raises ``TemplateRefused`` past a bound, on a sandbox refusal or a failure."""
        seconds = self.limits.template_render_s
        timed = f"its chat_template took longer than {seconds:g} s to render (CLIFFWATCH_TEMPLATE_RENDER_S)"
        try:
            if self.watchdog is None:
                return self._render(variables)
            with self.watchdog.within(seconds, timed):
                return self._render(variables)
        except BoundExceeded as exc:
            raise TemplateRefused(exc.message) from None
        except _TooLarge as exc:
            raise TemplateRefused(f"its chat_template would build {exc} (CLIFFWATCH_TEMPLATE_MAX_CHARS: "
                                  f"{self.limits.template_max_chars:,})") from None  # fmt: skip
        except SecurityError:
            raise TemplateRefused("its chat_template did what Jinja's sandbox forbids") from None
        except TemplateRefused:
            raise
        except Exception as exc:  # raise_exception(), an undefined name, a type error: the kind, not the text
            raise TemplateRefused(f"its chat_template failed to render ({type(exc).__name__})") from None

    def _render(self, variables: dict[str, Any]) -> str:
        parts: list[str] = []
        size = 0
        chunks: Iterator[str] = self._template.generate(**variables)
        for chunk in chunks:
            size += len(chunk)
            if size > self.limits.template_max_chars:
                raise _TooLarge(f"an output of more than {self.limits.template_max_chars:,} characters")
            parts.append(chunk)
        return "".join(parts)
