"""cliffwatch: chaos and recovery scenarios for HTTP and LLM inference APIs, judged by goodput."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
