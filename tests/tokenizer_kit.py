"""A small Hugging Face tokenizer trained here, offline, for the token-exact prompt tests (nothing downloaded);
importable from every test directory, like report_kit.

``train_tokenizer`` trains a byte-level BPE (the GPT-2 family's scheme: a byte-level pre-tokenizer that splits
on whitespace before merging) on English text, with chat special tokens, and writes ``tokenizer.json`` and,
with ``chat_template``, a ``tokenizer_config.json`` whose template is shaped like the Hugging Face ones
(Jinja, ``messages``, ``add_generation_prompt``, ``bos_token``).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from cliffwatch.adapters.loadgen.prompts import VOCABULARY

SPECIALS = ("<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness. People of the world worked day and night; each family in the country had a house, a "
    "school and a friend. Numbers like 12, 345 and 6789 appear in requests req-1 req-22 req-333. "
)


def train_tokenizer(directory: Path, *, chat_template: bool = True, vocab_size: int = 600) -> Path:
    """Trains and writes the tokenizer into ``directory``; returns the directory."""
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [_TEXT * 3, " ".join(VOCABULARY) * 20, " ".join(f"the {w} of" for w in VOCABULARY) * 5]
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    if chat_template:
        config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": CHAT_TEMPLATE}
        (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def char_tokenizer(directory: Path) -> Path:
    """A tokenizer without merges: every character is a token, so no word is one token."""
    return train_tokenizer(directory, chat_template=False, vocab_size=260)
