"""The service's values: runs, dashboard sessions, trends, caps."""
