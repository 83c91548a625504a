"""Comparing two runs: is B worse than A, or is it noise? (docs/gamedays.md, "Compare")"""
