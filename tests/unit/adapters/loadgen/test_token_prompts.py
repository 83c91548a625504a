"""Token-exact prompts under a tokenizer trained in the test (tests/tokenizer_kit.py): exact, or refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from cliffwatch.adapters.loadgen.token_prompts import (
    MAX_TOKENIZER_BYTES,
    TokenExactPrompts,
    TokenizerUnavailable,
    load_counter,
)
from tokenizer_kit import char_tokenizer, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok"))


def text(prompts: TokenExactPrompts, request_id: int, tokens: int) -> str:
    return b"".join(prompts.fragments(request_id, tokens)).decode("ascii")


@pytest.mark.parametrize("chat", [True, False])
def test_every_prompt_counts_exactly_the_tokens_asked_for(tokenizer_dir: Path, chat: bool) -> None:
    """Through the chat template (chat) or with the special tokens (completions), for many ids and lengths."""
    counter = load_counter(str(tokenizer_dir), chat=chat, data_dirs=(tokenizer_dir,))
    prompts = TokenExactPrompts(counter, path="tok")
    misses = [
        (request_id, tokens)
        for request_id in range(0, 5000, 37)
        for tokens in (prompts.least(request_id), 20, 129, 1000, 5000)
        if counter.prompt(text(prompts, request_id, tokens)) != max(tokens, prompts.least(request_id))
    ]
    assert misses == []
    assert prompts.overhead == (7 if chat else 1)  # <s> <|user|> \n … <|end|> \n <|assistant|> \n, or <s>
    assert text(prompts, 42, 50).startswith("req-42 ")


def test_a_length_below_the_tag_and_template_gives_the_shortest_prompt(tokenizer_dir: Path) -> None:
    prompts = TokenExactPrompts(load_counter(str(tokenizer_dir), chat=True, data_dirs=(tokenizer_dir,)), path="tok")
    assert text(prompts, 123, 1) == "req-123"


def test_a_tokenizer_without_one_token_words_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(TokenizerUnavailable, match="only 0 common English words are one token each"):
        TokenExactPrompts(load_counter(str(char_tokenizer(tmp_path)), chat=False, data_dirs=(tmp_path,)), path="chars")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "tokenizer.json is not a Hugging Face tokenizer (Exception)"),
        (b"\xff\xfe", "tokenizer.json is not a Hugging Face tokenizer (UnicodeDecodeError)"),
    ],
)
def test_a_file_that_is_not_a_tokenizer_is_refused_without_quoting_it(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    (tmp_path / "tokenizer.json").write_bytes(content)
    with pytest.raises(TokenizerUnavailable) as caught:
        load_counter(str(tmp_path), chat=True, data_dirs=(tmp_path,))
    assert caught.value.reason == reason


def test_a_missing_or_huge_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenizerUnavailable, match=r"tokenizer\.json: .*tokenizer\.json does not exist"):
        load_counter(str(tmp_path), chat=False, data_dirs=(tmp_path,))
    huge = tmp_path / "tokenizer.json"
    with huge.open("wb") as handle:
        handle.truncate(MAX_TOKENIZER_BYTES + 1)
    with pytest.raises(TokenizerUnavailable, match="over the limit"):
        load_counter(str(huge), chat=False, data_dirs=(tmp_path,))


def test_a_chat_template_that_does_not_compile_is_refused(tmp_path: Path) -> None:
    train_tokenizer(tmp_path, chat_template=False)
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{% for %}"}', encoding="utf-8")
    with pytest.raises(TokenizerUnavailable, match="chat_template does not compile"):
        load_counter(str(tmp_path), chat=True, data_dirs=(tmp_path,))


def test_a_tokenizer_json_linking_out_of_the_data_directories_is_refused_unread(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    """The tokenizer's directory is allowed, but a tokenizer.json (or tokenizer_config.json) in it that links to a
    file elsewhere is checked as any data file and refused, naming the limit, never what it holds."""
    allowed = tmp_path / "data"
    (allowed / "tok").mkdir(parents=True)
    secret = tmp_path / "secret.json"
    secret.write_text('{"password": "hunter2"}', encoding="utf-8")
    (allowed / "tok" / "tokenizer.json").symlink_to(secret)
    with pytest.raises(TokenizerUnavailable) as caught:
        load_counter(str(allowed / "tok"), chat=False, data_dirs=(allowed,))
    assert "outside the directories data files may be read from" in caught.value.reason
    assert "hunter2" not in caught.value.reason
    (allowed / "tok" / "tokenizer.json").unlink()
    (allowed / "tok" / "tokenizer.json").write_bytes((tokenizer_dir / "tokenizer.json").read_bytes())
    (allowed / "tok" / "tokenizer_config.json").symlink_to(secret)
    with pytest.raises(TokenizerUnavailable, match=r"tokenizer_config\.json: .*outside the directories"):
        load_counter(str(allowed / "tok"), chat=True, data_dirs=(allowed,))
