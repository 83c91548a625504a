"""AIPerf 0.13.0 (NVIDIA), ``aiperf profile`` at a constant request rate, read from its JSON export.

Offline use needs two things (found by reading its source, 2026-12-03): a tokenizer — AIPerf counts prompt
and answer tokens with a Hugging Face tokenizer, and its ``builtin`` one downloads tiktoken's file — so the
benchmark builds a word-level tokenizer (``tokenizers``, from AIPerf's own dependencies) over the prompt's
words into ``bench/.build/peers/aiperf-tokenizer``; and ``--no-server-metrics`` / ``--no-gpu-telemetry``,
or it scrapes ``/metrics`` of the target (which the server would record as load) and polls port 9400.
Its default arrival pattern is Poisson: ``--arrival-pattern constant`` gives the even schedule the other
tools send. It has no warm-up unless asked, and leaves its memory-mapped dataset under
``AIPERF_DATASET_MMAP_BASE_PATH`` (the pass's scratch directory here, so nothing piles up in /tmp).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from peers import install
from peers.tools import PROMPT, Command, Load, ToolView

TOKENIZER = install.PEERS / "aiperf-tokenizer"
_TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
corpus, out = sys.argv[1], sys.argv[2]
tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer.train([corpus], trainers.WordLevelTrainer(special_tokens=["[UNK]"], min_frequency=1))
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(out)
"""


def word_tokenizer(script: Path) -> Path:
    """One token per whitespace-separated word of the prompt and the server's answer (" tok")."""
    if (TOKENIZER / "tokenizer.json").exists():
        return TOKENIZER
    corpus = install.PEERS / "aiperf-tokenizer-corpus.txt"
    corpus.write_text(PROMPT + " tok\n")
    subprocess.run([str(script.parent / "python"), "-c", _TOKENIZER_SCRIPT, str(corpus), str(TOKENIZER)], check=True)
    return TOKENIZER


class AIPerf:
    name = "aiperf"
    streams = True
    plain = False  # it speaks only OpenAI-style and other inference APIs
    pinned = True
    exit_ok = frozenset({0})

    def command(self, load: Load) -> Command:
        script = install.python_peer("aiperf")
        prompts = load.scratch / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"text": PROMPT}) + "\n" for _ in range(100)))
        argv = [
            str(script), "profile", "-m", "bench", "--tokenizer", str(word_tokenizer(script)),
            "--url", load.base_url, "--endpoint-type", "chat", "--streaming",
            "--request-rate", f"{load.rate:g}", "--arrival-pattern", "constant",
            "--benchmark-duration", f"{load.duration_s:g}", "--benchmark-grace-period", "10",
            "--input-file", str(prompts), "--custom-dataset-type", "single_turn", "--osl", str(load.chunks),
            "--no-server-metrics", "--no-gpu-telemetry", "--ui", "none",
            "--artifact-dir", str(load.scratch / "aiperf"), "--random-seed", "1",
        ]  # fmt: skip
        return Command(argv, env={"AIPERF_DATASET_MMAP_BASE_PATH": str(load.scratch)})

    def read(self, load: Load, done: subprocess.CompletedProcess[bytes]) -> ToolView:
        out = load.scratch / "aiperf" / "profile_export_aiperf.json"
        if not out.exists():  # it writes none when every request failed
            return ToolView(p99_ms=None, errors=None, extra={"exit_code": done.returncode})
        figures = json.loads(out.read_text())
        ttft = figures.get("time_to_first_token") or {}
        errors = (figures.get("error_request_count") or {}).get("avg", 0)  # absent when there were none
        return ToolView(
            p99_ms=ttft.get("p99"),
            errors=int(errors),
            extra={
                "request_count": (figures.get("request_count") or {}).get("avg"),
                "throughput": (figures.get("request_throughput") or {}).get("avg"),
            },
        )
