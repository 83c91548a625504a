"""The REST API (``/api/v1``): an aiohttp app over the services, with problem responses, bearer tokens
and roles, and limits on what it serves at once. ``create_app`` builds it from ``ApiServices``."""

from __future__ import annotations

from cliffwatch.adapters.api.app import MAX_LINE_SIZE, create_app
from cliffwatch.adapters.api.context import ApiServices
from cliffwatch.adapters.api.metrics import ServiceMetrics

__all__ = ["MAX_LINE_SIZE", "ApiServices", "ServiceMetrics", "create_app"]
