"""Game days: suites of experiments, each with a hypothesis that holds or breaks (docs/gamedays.md)."""
