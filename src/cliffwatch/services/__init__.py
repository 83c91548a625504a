"""Orchestration written against small ports: run a scenario, aggregate, score."""
