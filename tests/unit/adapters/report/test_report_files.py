"""Result files read for a report: anything that is not a result is a ``ReportInvalid`` naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from cliffwatch.adapters.report.files import read_result_file
from cliffwatch.adapters.report.render import ReportInvalid


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"run_id": ' + "1" * 5_000 + "}", "a number of more than 400 characters"),
        ('{"run_id": NaN}', "NaN is not a number in JSON"),
        ('{"run_id": "\\udc00"}', "unpaired surrogate"),
    ],
    ids=["deep", "huge-number", "nan", "surrogate"],
)
def test_a_hostile_result_file_is_refused_with_the_reason(tmp_path: Path, content: str, message: str) -> None:
    """Nesting past the parser's recursion, numbers Python will not convert, NaN or broken Unicode make the
    file not a result, said against the file, never a crash."""
    path = tmp_path / "result.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ReportInvalid) as caught:
        read_result_file(path)
    assert str(path) in str(caught.value)
    assert message in str(caught.value)
