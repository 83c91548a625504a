"""The web dashboard under ``/ui/``: server-rendered pages over the same services as the API, behind a
login that takes an API token and keeps a server-side session. ``mount_dashboard`` adds it to the API app."""

from __future__ import annotations

from cliffwatch.adapters.dashboard.app import PREFIX, create_dashboard, mount_dashboard

__all__ = ["PREFIX", "create_dashboard", "mount_dashboard"]
