"""What one attempt has learnt so far, filled in as its answer arrives, and the ``Attempt`` it finally is."""

from __future__ import annotations

from cliffwatch.adapters.loadgen.openai_stream import OpenAIStream
from cliffwatch.domain.outcomes import Attempt, TokenSource
from cliffwatch.domain.scenario.completeness import Expectation, shortfall
from cliffwatch.domain.scenario.retry import FailureKind

EMPTY_ANSWER = "incomplete: empty answer (no content, reasoning or tool call)"


class AttemptState:
    """Times are ``perf_counter_ns`` readings; :meth:`attempt` makes them relative to the run origin."""

    __slots__ = (
        "answered",
        "chunk_times",
        "empty",
        "end",
        "error",
        "failure",
        "finish_reason",
        "first_answer",
        "first_byte",
        "first_token",
        "prompt_tokens",
        "reasoning_tokens",
        "reply",
        "retry_after_s",
        "state",
        "status",
        "stream",
        "token_source",
        "tokens",
    )

    def __init__(self) -> None:
        self.failure: FailureKind | None = None
        self.error: str | None = None
        self.status: int | None = None
        self.first_byte: int | None = None
        self.first_token: int | None = None
        self.first_answer: int | None = None
        self.reasoning_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.chunk_times: tuple[int, ...] = ()
        self.tokens = 0
        self.token_source = TokenSource.NONE
        self.retry_after_s: float | None = None
        self.state: tuple[
            tuple[str, float], ...
        ] = ()  # the server-state headers' readings (domain.server.state_headers)
        self.stream: OpenAIStream | None = None
        self.end: int | None = None  # when the answer was complete, if that was before the body ended
        self.answered = False  # an OpenAI answer was read to its end: judge it against target.expect
        self.finish_reason: str | None = None
        self.empty = False
        self.reply: str | None = None  # the answer's text, when a conversation asked to keep it

    def fail(self, failure: FailureKind, error: str) -> None:
        self.failure = failure
        self.error = error

    def harvest(self, parser: OpenAIStream) -> None:
        """Takes what the stream delivered, also when the attempt failed part-way: tokens that arrived
        before a timeout or a reset were still generated and sent, and throughput must count them."""
        summary = parser.finish()
        self.first_token = summary.first_token_ns
        self.first_answer = summary.first_answer_ns
        self.reasoning_tokens = summary.reasoning_tokens
        self.prompt_tokens = summary.prompt_tokens
        self.chunk_times = summary.chunk_times_ns
        self.tokens = summary.output_tokens
        self.token_source = summary.token_source
        self.finish_reason = summary.finish_reason
        if parser.text is not None:
            self.reply = "".join(parser.text)
        if self.failure is None and summary.failure is not None:
            self.fail(summary.failure, summary.error or "stream failed")
        self.answered = True

    def judge(self, expect: Expectation, *, max_tokens: int) -> None:
        """An answer that ended properly, held against ``target.expect``: a hollow one is incomplete."""
        if self.empty and expect.min_output_tokens > 0:
            reason: str | None = EMPTY_ANSWER
        else:
            reason = shortfall(
                expect, finish_reason=self.finish_reason, output_tokens=self.tokens, max_tokens=max_tokens
            )
        if reason is not None:
            self.fail(FailureKind.INCOMPLETE, reason)

    def attempt(self, number: int, *, sent_ns: int, end_ns: int, origin_ns: int, pool_wait_ns: int) -> Attempt:
        def since(ns: int | None) -> int | None:
            return None if ns is None else ns - origin_ns

        return Attempt(
            number=number,
            sent_ns=sent_ns - origin_ns,
            end_ns=end_ns - origin_ns,
            failure=self.failure,
            status=self.status,
            error=self.error,
            pool_wait_ns=pool_wait_ns,
            first_byte_ns=since(self.first_byte),
            first_token_ns=since(self.first_token),
            first_answer_ns=since(self.first_answer),
            chunk_times_ns=tuple([t - origin_ns for t in self.chunk_times]) if self.chunk_times else (),
            output_tokens=self.tokens,
            token_source=self.token_source,
            reasoning_tokens=self.reasoning_tokens,
            server_prompt_tokens=self.prompt_tokens,
            retry_after_s=self.retry_after_s,
            state=self.state,
        )
