"""A tiny random-weight GGUF model around a real tokenizer, for a real ``llama-server`` to serve in tests.

No model weights can be downloaded here, and none are needed to test what cliffwatch measures of an engine:
its queueing, streaming, usage counts and refusals. The tokenizer is what prompt sizing is about, and it is
real: the vocabulary-only GGUF of Phi-3's tokenizer (a 32,064-token SentencePiece vocabulary, its BOS and
its chat template) that llama.cpp ships in ``models/`` for its own tokenizer tests, copied beside the
server by tests/engines/build-llama-server.sh. Around it the ``gguf`` package writes a one-layer ``llama``
architecture with random weights (seeded), so the server answers with nonsense tokens at full speed.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

EMBEDDING = 64
HEADS = 4
FEED_FORWARD = 128
TRAINED_CONTEXT = 4096


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def write_tiny_model(vocab_gguf: Path, destination: Path, *, seed: int = 7) -> Path:
    """Writes the model to ``destination`` (kept when it is already there) and returns its path."""
    if destination.exists():
        return destination
    vocab = gguf.GGUFReader(str(vocab_gguf))
    tokens = _field(vocab, "tokenizer.ggml.tokens")
    assert isinstance(tokens, list)
    n_vocab = len(tokens)
    writer = gguf.GGUFWriter(str(destination) + ".part", "llama")
    writer.add_name("cliffwatch-tiny-random")
    writer.add_context_length(TRAINED_CONTEXT)
    writer.add_embedding_length(EMBEDDING)
    writer.add_block_count(1)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBEDDING // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model(str(_field(vocab, "tokenizer.ggml.model")))
    writer.add_tokenizer_pre(str(_field(vocab, "tokenizer.ggml.pre")))
    writer.add_token_list(tokens)
    writer.add_token_scores(list(_field(vocab, "tokenizer.ggml.scores")))  # type: ignore[call-overload]
    writer.add_token_types(list(_field(vocab, "tokenizer.ggml.token_type")))  # type: ignore[call-overload]
    for key, add in (
        ("tokenizer.ggml.bos_token_id", writer.add_bos_token_id),
        ("tokenizer.ggml.eos_token_id", writer.add_eos_token_id),
        ("tokenizer.ggml.unknown_token_id", writer.add_unk_token_id),
        ("tokenizer.ggml.padding_token_id", writer.add_pad_token_id),
    ):
        add(int(_field(vocab, key)))  # type: ignore[call-overload]
    writer.add_add_bos_token(bool(_field(vocab, "tokenizer.ggml.add_bos_token")))
    writer.add_add_eos_token(bool(_field(vocab, "tokenizer.ggml.add_eos_token")))
    writer.add_chat_template(str(_field(vocab, "tokenizer.chat_template")))

    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    ones = np.ones(EMBEDDING, dtype=np.float32)
    writer.add_tensor("token_embd.weight", weights(n_vocab, EMBEDDING))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", weights(n_vocab, EMBEDDING))
    writer.add_tensor("blk.0.attn_norm.weight", ones)
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", weights(EMBEDDING, EMBEDDING))
    writer.add_tensor("blk.0.ffn_norm.weight", ones)
    writer.add_tensor("blk.0.ffn_gate.weight", weights(FEED_FORWARD, EMBEDDING))
    writer.add_tensor("blk.0.ffn_up.weight", weights(FEED_FORWARD, EMBEDDING))
    writer.add_tensor("blk.0.ffn_down.weight", weights(EMBEDDING, FEED_FORWARD))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    Path(str(destination) + ".part").rename(destination)
    return destination
