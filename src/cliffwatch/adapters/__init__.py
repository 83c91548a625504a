"""Edges: the aiohttp load client, scenario files, result files, terminal output."""
