"""The open-loop load generator: scheduling, the aiohttp client, SSE parsing and retries."""
