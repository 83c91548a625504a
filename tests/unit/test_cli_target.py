"""``cliffwatch target --config``: a file of model parameters that is not one is refused (exit 2), fast."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cliffwatch.cli import EXIT_INVALID, main


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("max_batch: " + "[" * 5_000 + "]" * 5_000 + "\n", "nested too deeply"),
        ("max_batch: " + "9" * 5_000 + "\n", "a number of more than 400 characters"),
        ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
         + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)),
         "aliases expand to more than 10,000 values"),
        ("- 1\n", "must be a mapping of model parameters"),
    ],
    ids=["deep", "huge-number", "alias-bomb", "list"],
)  # fmt: skip
def test_a_hostile_target_config_is_refused(tmp_path: Path, content: str, message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Deep nesting, an unconvertible number, an alias bomb or a list is an invalid configuration naming the
    file: exit 2 within a second, nothing served."""
    config = tmp_path / "model.yaml"
    config.write_text(content)
    started = time.monotonic()
    assert main(["target", "--port", "0", "--config", str(config)]) == EXIT_INVALID
    assert time.monotonic() - started < 1
    err = capsys.readouterr().err
    assert str(config) in err
    assert message in err
