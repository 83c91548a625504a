"""Composition roots: settings and a scenario in, a ready run, sweep or service out (``run``, ``sweep``,
``service``)."""
