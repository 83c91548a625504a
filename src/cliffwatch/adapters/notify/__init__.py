"""Telling people what happened: webhooks for game-day events (docs/gamedays.md, "Notifications")."""
