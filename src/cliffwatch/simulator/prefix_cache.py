"""The simulated target's prefix cache: prompts cut into blocks, each block known by the hash of itself and
everything before it, and the prefill of a prompt's leading cached blocks skipped.

This is how vLLM's automatic prefix caching works (``vllm/v1/core/kv_cache_utils.py``: a block's hash chains
its parent's hash with its own token ids, so only a shared *prefix* can hit; ``vllm/v1/core/block_pool.py``
evicts the least recently used free block). The simulator's tokens are words (``openai_format``), so a block
is ``block_tokens`` words. Only full blocks are cached, and a prompt served entirely from the cache still
computes its last token, as vLLM recomputes the last one to get its logits.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


def block_hashes(words: Sequence[str], block_tokens: int) -> tuple[int, ...]:
    """The chained hash of each full block of ``words``: block i's hash covers blocks 0…i."""
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(words) - block_tokens + 1, block_tokens):
        parent = hash((parent, tuple(words[start : start + block_tokens])))
        hashes.append(parent)
    return tuple(hashes)


def continued(parent: tuple[int, ...], tail: Sequence[str], more: Sequence[str], block_tokens: int) -> tuple[int, ...]:
    """The hashes of the full blocks that ``tail`` (the prompt's words after its last full block) and ``more``
    (the words generated after it) make, chained on from the prompt's last block: what a finished sequence
    leaves cached for a next turn that resends it (vLLM caches the blocks of generated tokens too)."""
    words = [*tail, *more]
    hashes: list[int] = []
    last = parent[-1] if parent else 0
    for start in range(0, len(words) - block_tokens + 1, block_tokens):
        last = hash((last, tuple(words[start : start + block_tokens])))
        hashes.append(last)
    return tuple(hashes)


def prompt_words(texts: Iterable[str]) -> list[str]:
    """The prompt's tokens as the simulator counts them: the words of each message (or prompt) in order."""
    words: list[str] = []
    for text in texts:
        words += text.split()
    return words


class PrefixCache:
    """Block hashes the engine holds, least recently used first; at most ``capacity_blocks`` of them."""

    def __init__(self, *, capacity_blocks: int, block_tokens: int) -> None:
        self.capacity_blocks = max(0, capacity_blocks)
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries_total = 0  # prompt tokens looked up (vLLM's prefix_cache_queries)
        self.hits_total = 0  # of those, tokens found cached (vLLM's prefix_cache_hits)

    def lookup(self, hashes: Sequence[int], prompt_tokens: int) -> int:
        """A prompt entering the batch: the tokens of its leading blocks already cached (its prefill skips
        them; never the whole prompt), counted as a query and its hits."""
        cached_blocks = 0
        for block in hashes:
            if block not in self._blocks:
                break
            cached_blocks += 1
        cached = min(cached_blocks * self.block_tokens, max(0, prompt_tokens - 1))
        self.queries_total += prompt_tokens
        self.hits_total += cached
        return cached

    def insert(self, hashes: Sequence[int]) -> None:
        """A prompt's blocks, computed: held as the most recently used (the oldest beyond capacity go)."""
        for block in hashes:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    @property
    def blocks(self) -> int:
        return len(self._blocks)
