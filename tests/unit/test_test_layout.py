"""The test tree has no __init__.py files, so pytest imports each test module by its bare
basename: two test files with the same name in different folders stop collection of the whole
suite ("import file mismatch"). This guards the layout before CI finds out."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_unique_basename() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
