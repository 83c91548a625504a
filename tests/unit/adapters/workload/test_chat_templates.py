"""Chat templates render within their bounds: a template written to hold the service (a long loop, a huge string,
a sandbox escape) is a validation problem that names what happened, never an internal error or a stall."""

from __future__ import annotations

import time

import pytest

from cliffwatch.adapters.workload.bounds import Watchdog
from cliffwatch.adapters.workload.chat_templates import ChatTemplate, TemplateRefused
from cliffwatch.domain.workload.prepared import PreparationLimits

LIMITS = PreparationLimits(template_render_s=0.3, template_max_chars=100_000)
# For the checks of size, not of time: a render that a busy machine slows must still reach the size check.
UNHURRIED = PreparationLimits(template_render_s=30, template_max_chars=100_000)
MESSAGES = [{"role": "user", "content": "hello"}]


def render(source: str, limits: PreparationLimits = LIMITS) -> str:
    with Watchdog(limits) as watchdog:
        return str(watchdog.run(lambda: ChatTemplate(source, limits=limits, watchdog=watchdog).render(
            messages=MESSAGES, add_generation_prompt=True)))  # fmt: skip


def test_a_hugging_face_shaped_template_renders() -> None:
    source = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}<|assistant|>"
    assert render(source) == "<|user|>hello<|assistant|>"


def test_a_loop_of_ten_million_steps_is_ended_at_the_render_bound() -> None:
    started = time.monotonic()
    with pytest.raises(TemplateRefused) as caught:
        render("{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}")
    assert time.monotonic() - started < 2
    assert caught.value.reason == "its chat_template took longer than 0.3 s to render (CLIFFWATCH_TEMPLATE_RENDER_S)"


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'a' * 10**8 }}",
        "{{ 'a' * 100000000 }}",
        "{{ ['a'] * 100000000 }}",
        "{{ 'a' | center(100000000) }}",
        "{{ 'a'.ljust(100000000) }}",
        "{{ '{:>100000000}'.format(1) }}",
        "{{ '%100000000s' % 'a' }}",
        "{{ 9 ** 99999999 }}",
        "{{ ('a' * 50000) | replace('a', 'aaaaaaaaaa') }}",
    ],
)
def test_a_huge_string_is_refused_before_it_is_built(source: str) -> None:
    with pytest.raises(TemplateRefused, match="CLIFFWATCH_TEMPLATE_MAX_CHARS: 100,000"):
        render(source, UNHURRIED)


def test_output_past_the_bound_is_refused() -> None:
    with pytest.raises(TemplateRefused, match="an output of more than 100,000 characters"):
        render("{% for i in range(100000) %}{{ 'abcdef' }}{% endfor %}", UNHURRIED)


def test_a_sandbox_escape_is_a_validation_problem_not_an_internal_error() -> None:
    with pytest.raises(TemplateRefused) as caught:
        render("{{ ''.__class__.__mro__[1].__subclasses__() }}", UNHURRIED)
    assert caught.value.reason == "its chat_template did what Jinja's sandbox forbids"


def test_a_failing_template_names_the_kind_of_failure_not_the_text() -> None:
    with pytest.raises(TemplateRefused) as caught:
        render("{{ messages[0]['content'] + 1 }}", UNHURRIED)
    assert caught.value.reason == "its chat_template failed to render (TypeError)"


def test_a_template_that_does_not_compile_is_refused_without_quoting_it() -> None:
    with pytest.raises(TemplateRefused) as caught:
        ChatTemplate("{% for %}SECRET-TEXT", limits=LIMITS)
    assert "SECRET-TEXT" not in caught.value.reason
    assert caught.value.reason.startswith("its chat_template does not compile")
