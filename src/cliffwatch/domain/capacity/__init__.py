"""Capacity sweeps: spec and plan, steps, search, statistics, luck, growth, queueing, the result."""
