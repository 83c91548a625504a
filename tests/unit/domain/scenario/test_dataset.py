"""How a phase draws dataset entries: seeded, with or without replacement."""

from __future__ import annotations

from cliffwatch.domain.scenario.dataset import DatasetFormat, DatasetSizes, DatasetSpec


def spec(replacement: bool, entries: int = 5) -> DatasetSpec:
    sizes = DatasetSizes(prompt_tokens=(10,) * entries, output_tokens=(None,) * entries, digest="d")
    return DatasetSpec(path="d", format=DatasetFormat.JSONL, replacement=replacement, loaded=sizes)


def test_without_replacement_every_entry_is_drawn_once_before_any_again() -> None:
    draws = spec(False).draws(0, seed=3)
    first, second = [draws.next() for _ in range(5)], [draws.next() for _ in range(5)]
    assert sorted(first) == sorted(second) == [0, 1, 2, 3, 4]
    assert first != [0, 1, 2, 3, 4]  # shuffled, not in file order


def test_draws_are_the_same_for_the_same_seed_and_phase_and_differ_across_phases() -> None:
    one = spec(True).draws(0, seed=3)
    again = spec(True).draws(0, seed=3)
    other = spec(True).draws(1, seed=3)
    sequence = [one.next() for _ in range(50)]
    assert sequence == [again.next() for _ in range(50)]
    assert sequence != [other.next() for _ in range(50)]
    assert set(sequence) <= {0, 1, 2, 3, 4}


def test_before_loading_there_is_nothing_to_draw() -> None:
    unloaded = DatasetSpec(path="d", format=DatasetFormat.JSONL)
    assert unloaded.draws(0, seed=1).next() == -1
