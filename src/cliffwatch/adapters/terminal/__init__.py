"""The terminal: live progress and scorecards of runs and sweeps."""
