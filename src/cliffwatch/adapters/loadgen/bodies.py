"""Request bodies prepared ahead: the JSON of a run's requests, built once and filled in per request by copying.

An OpenAI body differs between requests only in its prompt and its ``max_tokens``; everything else (model,
stream flags, ``extra_body``) is the scenario's. So the body is encoded once, with placeholders where those
go, and split around them; a request's body is then the template's parts joined with its prompt's bytes
(``prompts.fragments``, already JSON-safe) and its number, which costs one copy of its length and never
holds the event loop for longer than that. ``extra_body`` is merged as before and wins, as before: a key it
sets (say ``max_tokens``) simply has no placeholder. The bytes are exactly those ``json.dumps`` of the
whole document gave. A plain ``http`` body is the same for every request and encoded once.

The prompt's pieces come from a ``PromptMaker`` (``domain.workload.prepared``): words, words sized by a calibration, or
token-exact prompts under the scenario's tokenizer; each gives JSON-safe fragments prepared ahead.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from cliffwatch.adapters.loadgen import prompts
from cliffwatch.adapters.loadgen.token_prompts import WordCount
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.scenario.conversations import PREFIX_ID_BASE, PrefixSpec
from cliffwatch.domain.scenario.dataset import LoadedDataset
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import Api, RequestTemplate
from cliffwatch.domain.security.secrets import unresolved_body
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.workload.prepared import PromptMaker

# Per process, random: no scenario can contain them by chance, so a split never lands in the user's values.
_PROMPT = f"cliffwatch-prompt-{uuid.uuid4().hex}"
_MAX_TOKENS = f"cliffwatch-max-tokens-{uuid.uuid4().hex}"
_MESSAGES = f"cliffwatch-messages-{uuid.uuid4().hex}"  # a dataset's chat messages: the whole array


class RequestBodies:
    """Every request body of one scenario: ``render(request)``, None for a plain request without a body."""

    def __init__(
        self,
        scenario: Scenario,
        source: PromptMaker | None = None,
        dataset: LoadedDataset | None = None,
        *,
        template: RequestTemplate | None = None,
        prefix: PrefixSpec | None = None,
    ) -> None:
        template = template or scenario.target.request  # a traffic class's own, or the target's
        if unresolved_body(template.body) or unresolved_body(template.extra_body):
            raise CliffwatchError("a request body still holds a secret reference: the run's start reads every one")
        self._source: PromptMaker = source or WordCount(prompts.WORDS)
        self._dataset = dataset
        self._prefix = prefix
        self._prefixes: dict[int, bytes] = {}  # each shared prefix's text, made when first sent
        # Added to request ids in the prompts' text (tag and filler): a sweep's steps each number their requests
        # from 0, and must not send one another's prompts (HttpExecutor.next_prompts).
        self.salt = 0
        self._chat = scenario.target.api is Api.OPENAI_CHAT
        self._bust = template.dataset is None or template.dataset.cache_bust
        self._constant: bytes | None = None
        self._parts: list[bytes | str] = []  # literal bytes, or which placeholder goes there
        if scenario.target.api is Api.HTTP:
            self._constant = None if template.body is None else json.dumps(template.body).encode()
            return
        longest = max(template.prompt_tokens.largest if template.prompt_tokens else 0, prefix.tokens if prefix else 0)
        if longest:
            self._source.prepare(longest)
        stream = template.stream
        document: dict[str, Any] = {"model": template.model, "max_tokens": _MAX_TOKENS, "stream": stream}
        if self._chat:
            document["messages"] = _MESSAGES
        else:
            document["prompt"] = _PROMPT
        if stream and template.include_usage:
            document["stream_options"] = {"include_usage": True}
        if template.extra_body:
            document.update(template.extra_body)
        slots = {json.dumps(_PROMPT): _PROMPT, json.dumps(_MAX_TOKENS): _MAX_TOKENS, json.dumps(_MESSAGES): _MESSAGES}
        # Split around the quoted placeholders (kept, as the split's odd items): literal, slot, literal, ...
        pieces = re.split("(" + "|".join(map(re.escape, slots)) + ")", json.dumps(document))
        self._parts = [slots[piece] if index % 2 else piece.encode() for index, piece in enumerate(pieces)]

    def render(self, request: PlannedRequest, history: Sequence[bytes] = ()) -> bytes | None:
        """The request's body; ``history``: its conversation's earlier turns (``turn``), sent before it."""
        if self._constant is not None or not self._parts:
            return self._constant
        pieces: list[bytes | memoryview] = []
        for part in self._parts:
            if part is _MESSAGES:
                pieces += self._chat_messages(request, history)
            elif part is _PROMPT:
                pieces += (b'"', *self._prefix_text(request, b" "), *history, *self._own(request), b'"')
            elif part is _MAX_TOKENS:
                pieces.append(b"%d" % request.max_tokens)
            else:
                assert isinstance(part, bytes)
                pieces.append(part)
        return b"".join(pieces)

    def observe(self, request: PlannedRequest, counted: int) -> None:
        """The server counted the request's own prompt (sized alone) as ``counted`` tokens."""
        self._source.observe(request.id + self.salt, counted)

    def turn(self, request: PlannedRequest, reply: str) -> list[bytes]:
        """What a conversation's answered turn adds to its history: the user's prompt and the server's reply,
        as chat messages (or, for completions, as text) ready to go into the next turn's body."""
        own = b"".join(self._own(request))
        answer = json.dumps(reply).encode()  # ASCII, escaped: safe inside a JSON document as it is
        if self._chat:
            user = b'{"role": "user", "content": "' + own + b'"}'
            return [user, b'{"role": "assistant", "content": ' + answer + b"}"]
        return [own + b" ", answer[1:-1] + b" "]

    def _own(self, request: PlannedRequest) -> tuple[bytes | memoryview, ...]:
        """The request's own prompt text (JSON-safe pieces): a dataset entry's, or one made to its length."""
        if self._dataset is not None and request.entry >= 0:
            return (*self._tag(request), self._entry_text(request))
        return self._source.fragments(request.id + self.salt, request.prompt_tokens)

    def _prefix_text(self, request: PlannedRequest, after: bytes) -> tuple[bytes, ...]:
        """The shared prefix the request opens with (its group's: the same bytes for every request of the
        group, so a prefix cache can reuse them), followed by ``after``; () without one."""
        if self._prefix is None or request.prefix < 0:
            return ()
        text = self._prefixes.get(request.prefix)
        if text is None:
            pieces = self._source.fragments(PREFIX_ID_BASE + request.prefix, self._prefix.tokens)
            text = self._prefixes[request.prefix] = b"".join(pieces)
        return (text, after)

    def _chat_messages(self, request: PlannedRequest, history: Sequence[bytes]) -> list[bytes | memoryview]:
        """The chat ``messages``: the shared prefix as a system message, the conversation so far, the turn."""
        system = self._prefix_text(request, b"")
        items: list[bytes | memoryview] = []
        if system:
            items += (b'{"role": "system", "content": "', system[0], b'"}, ')
        for piece in history:
            items += (piece, b", ")
        if self._dataset is not None:
            own = self._messages(request)
            if items:  # a dataset's messages come as a whole array: the prefix and history go inside it
                joined = b"".join(own)
                return [b"[", *items, joined[1:]]
            return list(own)
        return [b"[", *items, b'{"role": "user", "content": "', *self._own(request), b'"}]']

    def _tag(self, request: PlannedRequest) -> tuple[bytes, ...]:
        return (b"req-%d " % (request.id + self.salt),) if self._bust else ()

    def _entry_text(self, request: PlannedRequest) -> bytes:
        assert self._dataset is not None
        text = self._dataset.prompts[request.entry]
        return text if isinstance(text, bytes) else b""

    def _messages(self, request: PlannedRequest) -> tuple[bytes, ...]:
        """The chat messages of the request's dataset entry (a prompt as one user message), tag included."""
        assert self._dataset is not None
        prepared = self._dataset.prompts[request.entry] if request.entry >= 0 else b""
        if isinstance(prepared, tuple):  # messages as given, split where the tag goes
            before, after = prepared
            return (before, *self._tag(request), after) if after else (before,)
        return (b'[{"role": "user", "content": "', *self._tag(request), prepared, b'"}]')
