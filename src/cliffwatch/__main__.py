"""``python -m cliffwatch`` runs the command line."""

from __future__ import annotations

from cliffwatch.cli import main

raise SystemExit(main())
