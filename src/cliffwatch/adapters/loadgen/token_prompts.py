"""Prompts of an exact number of tokens, as a Hugging Face tokenizer counts them, or as a calibration fits them.

``request.tokenizer: PATH`` names a ``tokenizer.json`` or a directory holding one (and, for chat, its
``tokenizer_config.json``, whose ``chat_template`` is then applied the way the server applies it). The
``tokenizers`` library reads it offline (the ``cliffwatch[tokenizers]`` extra); nothing is downloaded.

A token-exact prompt is the request's tag (``req-<id>``, the prefix-cache buster) and filler words that are
one token each under this tokenizer, so a prompt of N tokens is its tag's tokens, N − tag − overhead filler
words, and the overhead (special tokens, the chat template) counted once. That holds for tokenizers that
split on whitespace before merging (byte-level BPE, Metaspace/SentencePiece), which :class:`TokenExactPrompts`
checks on a sample of whole prompts when it is made; one that does not is refused, naming the miss, rather
than sending prompts of unknown size. Per request only the tag is encoded (a few microseconds): the filler
is a slice of text prepared ahead, as for word prompts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cliffwatch.adapters.loadgen.prompts import VOCABULARY, WordPrompts
from cliffwatch.adapters.workload.bounds import Watchdog
from cliffwatch.adapters.workload.chat_templates import ChatTemplate, TemplateRefused
from cliffwatch.adapters.workload.data_files import DataFileRefused, readable_data_file
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.workload.prepared import DEFAULT_LIMITS, PreparationLimits
from cliffwatch.domain.workload.prompt_sizing import Calibration
from cliffwatch.domain.workload.sizing_loop import SizingLoop

MAX_TOKENIZER_BYTES = 64 * 1024 * 1024  # tokenizer.json files of large vocabularies are 10–20 MB
MIN_FILLER_WORDS = 8
# Common English words: most tokenizers hold each, after a space, as one token.
_COMMON = (
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state",
    "family", "group", "country", "problem", "hand", "part", "place", "case", "week", "company", "system",
    "program", "question", "work", "number", "night", "point", "home", "water", "room", "mother", "area", "money",
    "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue", "side",
    "kind", "head", "house", "service", "friend", "father", "power", "hour", "game", "line", "end", "member",
)  # fmt: skip
_SAMPLE_IDS = (0, 7, 99, 1234, 65_537)
_SAMPLE_LENGTHS = (1, 2, 17, 300)


class TokenizerUnavailable(CliffwatchError):
    """The tokenizer a scenario names cannot be used: ``reason`` says why (never the file's content)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"tokenizer {path}: {reason}")


class TokenCounter:
    """Counts a prompt's tokens the way the server will: through the chat template for chat, with the
    tokenizer's special tokens for completions. Sent to a generator worker, it goes without its template: the
    counts that need it were made where the run was prepared."""

    def __init__(
        self, tokenizer: Any, *, chat: bool, template: ChatTemplate | None, specials: dict[str, str], path: str = ""
    ) -> None:
        self._tokenizer = tokenizer
        self.chat = chat
        self._template = template
        self._specials = specials
        self.path = path

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_template": None}

    @property
    def applies_template(self) -> bool:
        return self.chat and self._template is not None

    def plain(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def prompt(self, text: str) -> int:
        """The server's count of a prompt whose user content (chat) or prompt (completions) is ``text``; raises
        ``TokenizerUnavailable`` when the chat template cannot render it within its bounds."""
        if not self.chat:
            return len(self._tokenizer.encode(text, add_special_tokens=True).ids)
        if self._template is None:
            return self.plain(text)
        try:
            rendered = self._template.render(
                messages=[{"role": "user", "content": text}], add_generation_prompt=True, **self._specials
            )
        except TemplateRefused as exc:
            raise TokenizerUnavailable(self.path, f"tokenizer_config.json: {exc.reason}") from None
        return len(self._tokenizer.encode(rendered, add_special_tokens=False).ids)


def load_counter(
    path: str,
    *,
    chat: bool,
    data_dirs: tuple[Path, ...] | None,
    limits: PreparationLimits = DEFAULT_LIMITS,
    watchdog: Watchdog | None = None,
) -> TokenCounter:
    """The tokenizer at ``path`` (a tokenizer.json, or a directory with one and maybe tokenizer_config.json). Each
    file is read as a data file: below ``data_dirs`` once its symlinks are followed, a regular file, within its
    limit (the directory being allowed says nothing of a ``tokenizer.json`` in it that links elsewhere). Its chat
    template renders within ``limits`` (``chat_templates``), timed by ``watchdog`` when given."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
        raise TokenizerUnavailable(path, "needs the tokenizers library: pip install 'cliffwatch[tokenizers]'") from exc
    target = Path(path)
    file = target / "tokenizer.json" if target.is_dir() else target
    config_file = (target if target.is_dir() else target.parent) / "tokenizer_config.json"
    limit = min(MAX_TOKENIZER_BYTES, limits.max_file_bytes)
    try:
        text = readable_data_file(str(file), data_dirs=data_dirs, limit=limit).decode("utf-8")
        tokenizer = Tokenizer.from_str(text)
    except DataFileRefused as exc:
        raise TokenizerUnavailable(path, f"{file.name}: {exc.reason}") from exc
    except Exception as exc:  # the library raises plain Exceptions; its text may quote the file, so it is left out
        raise TokenizerUnavailable(path, f"{file.name} is not a Hugging Face tokenizer ({type(exc).__name__})") from exc
    has_config = chat and (config_file.is_file() or config_file.is_symlink())
    template: ChatTemplate | None = None
    specials: dict[str, str] = {}
    if has_config:
        template, specials = _chat_template(config_file, data_dirs, limit=limit, limits=limits, watchdog=watchdog)
    return TokenCounter(tokenizer, chat=chat, template=template, specials=specials, path=path)


def _chat_template(
    config_file: Path, data_dirs: tuple[Path, ...] | None, *, limit: int, limits: PreparationLimits,
    watchdog: Watchdog | None,
) -> tuple[ChatTemplate | None, dict[str, str]]:  # fmt: skip
    """The config's chat template compiled in a bounded Jinja sandbox (``chat_templates``), and its special tokens."""
    try:
        config = json.loads(readable_data_file(str(config_file), data_dirs=data_dirs, limit=limit))
    except DataFileRefused as exc:
        raise TokenizerUnavailable(str(config_file), f"tokenizer_config.json: {exc.reason}") from exc
    except ValueError as exc:  # its position only: the message of json's error names no content
        raise TokenizerUnavailable(str(config_file), f"tokenizer_config.json is not readable JSON ({exc})") from exc
    source = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(source, list):  # named templates: the default one
        source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(source, str):
        return None, {}
    specials = {}
    for key in ("bos_token", "eos_token"):
        value = config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            specials[key] = value
    try:
        return ChatTemplate(source, limits=limits, watchdog=watchdog), specials
    except TemplateRefused as exc:
        raise TokenizerUnavailable(str(config_file), f"tokenizer_config.json: {exc.reason}") from exc


class TokenExactPrompts:
    """Prompts of exactly N tokens under ``counter``; raises ``TokenizerUnavailable`` when it cannot be exact."""

    def __init__(self, counter: TokenCounter, *, path: str) -> None:
        self.counter = counter
        base = counter.plain("req-0")
        words = tuple(dict.fromkeys(w for w in (*VOCABULARY, *_COMMON) if counter.plain(f"req-0 {w}") - base == 1))
        if len(words) < MIN_FILLER_WORDS:
            raise TokenizerUnavailable(
                path,
                f"only {len(words)} common English words are one token each; token-exact prompts need "
                f"{MIN_FILLER_WORDS}",
            )
        self.filler_words = words
        self._words = WordPrompts(words)
        self.overhead = counter.prompt("req-0 time") - counter.plain("req-0 time")
        self._tags: dict[int, int] = {}
        for request_id in _SAMPLE_IDS:
            for tokens in _SAMPLE_LENGTHS:
                wanted = max(tokens, self.least(request_id))
                got = counter.prompt(b"".join(self.fragments(request_id, wanted)).decode("ascii"))
                if got != wanted:
                    raise TokenizerUnavailable(
                        path, f"a prompt built for {wanted} tokens counts {got}: this tokenizer does not add up "
                        "word by word, so prompts cannot be made token-exact with it"
                    )  # fmt: skip

    def least(self, request_id: int) -> int:
        """The shortest prompt this request can have: its tag and the overhead."""
        return self._tag_tokens(request_id) + self.overhead

    def prepare(self, tokens: int) -> None:
        self._words.prepare(tokens)

    def fragments(self, request_id: int, tokens: int) -> tuple[bytes | memoryview, ...]:
        """The prompt of ``tokens`` tokens, or the shortest this request can have when that is more."""
        tag = b"req-%d" % request_id
        filler = tokens - self._tag_tokens(request_id) - self.overhead
        if filler <= 0:
            return (tag,)
        return tag, b" ", self._words.filler(request_id, filler)

    def observe(self, request_id: int, counted: int) -> None:
        """Exact by construction: an answer that counts otherwise shows in the run's prompt error."""

    def _tag_tokens(self, request_id: int) -> int:
        known = self._tags.get(request_id)
        if known is None:
            if len(self._tags) > 100_000:  # ids are not reused within a run; keep the memory bounded
                self._tags.clear()
            known = self._tags[request_id] = self.counter.plain(f"req-{request_id}")
        return known


class CalibratedPrompts:
    """Word prompts sized by a line, ``tokens ≈ a + b × words``: a calibration's, or one word a token when a
    real target could not be calibrated; the answers' own counts refit it as the run goes (``SizingLoop``)."""

    def __init__(self, calibration: Calibration, words: WordPrompts) -> None:
        self.calibration = calibration
        self.loop = SizingLoop(calibration)
        self._words = words

    def prepare(self, tokens: int) -> None:
        self._words.prepare(self.loop.words_for(tokens))

    def fragments(self, request_id: int, tokens: int) -> tuple[bytes | memoryview, ...]:
        return self._words.fragments(request_id, self.loop.aim(request_id, tokens)[0])

    def observe(self, request_id: int, counted: int) -> None:
        self.loop.observe(request_id, counted)


class WordCount:
    """One word per token: the built-in target's count, and the fallback."""

    def __init__(self, words: WordPrompts) -> None:
        self._words = words

    def prepare(self, tokens: int) -> None:
        self._words.prepare(tokens)

    def fragments(self, request_id: int, tokens: int) -> tuple[bytes | memoryview, ...]:
        return self._words.fragments(request_id, tokens)

    def observe(self, request_id: int, counted: int) -> None:
        """The built-in target counts words: nothing to correct."""
