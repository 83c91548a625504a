"""The scenario as a value: its model, parsing and validation; the target, traffic classes, sessions, datasets and
traces as values; arrivals and distributions, retry, SLO, faults, completeness."""
