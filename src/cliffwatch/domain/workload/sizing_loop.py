"""Closed-loop prompt sizing: each answer's ``usage.prompt_tokens`` corrects how the next prompts are sized.

A preflight fit (calibration probes, or the server's ``/tokenize``) is a few readings taken before the load;
the run's answers are thousands more, of the very prompts the run sends. So every answer whose prompt was
sized alone (no shared prefix, no conversation history, not a dataset's own text) is fed back:

- sized by a line (``tokens ≈ a + b × words``: a calibration, or one word a token when none could be had):
  the answers' (words sent, tokens counted) pairs refit the line. While the words sent are too alike to
  find a slope (a plan of one length), the preflight's slope is kept and only the intercept moves, so the
  mean of the answers' counts is where the line puts it: the plan's offset is corrected.
- sized by a table (``tokenizer: server``: each length's words, and the one-token pads after them, found
  with the server's own tokenizer): the table is exact when the server counts prompts the way ``/tokenize``
  did; when it does not (a chat template ``/tokenize`` did not see), the answers' mean miss is an offset
  every length is shifted by.

A request's prediction is remembered from its send to its answer, so answers to prompts sized before a
correction are judged by what was predicted for them then, and a burst of them does not correct twice.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from cliffwatch.domain.workload.prompt_sizing import Calibration

MIN_ANSWERS_FOR_SLOPE = 8
# The sent word counts' spread (standard deviation) a slope is refitted from: below it the answers' own noise
# (words differ in tokens) would swing the slope more than it corrects.
MIN_WORDS_SPREAD = 4.0
MAX_PENDING = 65_536  # predictions waiting for their answer; the oldest are forgotten (requests that never answer)


class SizingLoop:
    """Words for a prompt of N tokens, from a line or a table, corrected by the answers it is told of."""

    def __init__(self, line: Calibration, table: Mapping[int, tuple[int, int, int]] | None = None) -> None:
        self.line = line
        self._table = dict(table) if table is not None else None
        self._intercept, self._slope = line.intercept, line.slope
        # key → (words sent, predicted count), oldest first: an OrderedDict forgets its oldest in O(1), where a
        # dict's first key is found past every slot deleted before it (requests that never answer, at any rate)
        self._pending: OrderedDict[int, tuple[int, float]] = OrderedDict()
        # table: tokens → (words, pads, what /tokenize counted them as: the prediction)
        self.answers = 0
        self._sum_w = self._sum_c = self._sum_ww = self._sum_wc = 0.0
        self._sum_miss = 0.0  # table: counted − predicted, summed

    def __getstate__(self) -> dict[str, Any]:
        # Sent to a generator worker before any load: what it learns, it learns from its own answers.
        state = dict(self.__dict__)
        state["_pending"] = OrderedDict()
        return state

    @property
    def offset(self) -> float:
        """A table's correction so far: the answers' mean miss, in tokens (0 before any answer)."""
        return self._sum_miss / self.answers if self.answers and self._table is not None else 0.0

    def words_for(self, tokens: int) -> int:
        """The words a prompt of ``tokens`` takes as things stand (nothing remembered)."""
        return self._choose(tokens)[0]

    def aim(self, key: int, tokens: int) -> tuple[int, int]:
        """The words, and the one-token pads after them, to send for a prompt of ``tokens``, remembering what
        was predicted under ``key``."""
        words, pads, predicted = self._choose(tokens)
        pending = self._pending
        pending.pop(key, None)  # a retry re-aims: its entry moves to the end
        if len(pending) >= MAX_PENDING:
            pending.popitem(last=False)
        pending[key] = (words, predicted)
        return words, pads

    def observe(self, key: int, counted: int) -> None:
        """The server counted the prompt sent under ``key`` as ``counted`` tokens."""
        sent = self._pending.pop(key, None)
        if sent is None or counted <= 0:
            return
        words, predicted = sent
        self.answers += 1
        if self._table is not None:
            self._sum_miss += counted - predicted
            return
        w, c = float(words), float(counted)
        self._sum_w += w
        self._sum_c += c
        self._sum_ww += w * w
        self._sum_wc += w * c
        self._refit()

    def describe(self) -> dict[str, Any]:
        """Where the loop stands: the answers it learned from and the line (or the table's offset) it sizes by."""
        if self._table is not None:
            return {"answers": self.answers, "offset": round(self.offset, 3)}
        return {"answers": self.answers, "intercept": round(self._intercept, 3), "slope": round(self._slope, 4)}

    def _choose(self, tokens: int) -> tuple[int, int, float]:
        if self._table is not None:
            target = tokens - round(self.offset)
            known = self._table.get(target)
            if known is not None:
                return known[0], known[1], float(known[2])
            words = self.line.words_for(target)
            return words, 0, self.line.intercept + self.line.slope * words
        words = max(1, round((tokens - self._intercept) / self._slope))
        return words, 0, self._intercept + self._slope * words

    def _refit(self) -> None:
        n = float(self.answers)
        mean_w, mean_c = self._sum_w / n, self._sum_c / n
        variance = max(0.0, self._sum_ww / n - mean_w * mean_w)
        if self.answers >= MIN_ANSWERS_FOR_SLOPE and math.sqrt(variance) >= MIN_WORDS_SPREAD:
            slope = (self._sum_wc / n - mean_w * mean_c) / variance
            if slope > 0:
                self._slope = slope
        self._intercept = mean_c - self._slope * mean_w
