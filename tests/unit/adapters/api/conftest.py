"""Fixtures for the API tests: the app served on 127.0.0.1 by aiohttp's test server (see api_harness)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from api_harness import Api, build_parts, make_settings, serve

from cliffwatch.config import Settings


@pytest.fixture
def settings() -> Settings:
    return make_settings()


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    async with serve(await build_parts(settings), settings) as served:
        yield served
