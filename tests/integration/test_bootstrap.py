"""How the composition root decides whether fault scenarios can run here."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from cliffwatch.bootstrap.run import toxiproxy_unavailable
from cliffwatch.config import Settings
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist


def settings(tmp_path: Path, **overrides: Any) -> Settings:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    return Settings(allowlist=allowlist, state_dir=tmp_path, **overrides)


async def test_fault_scenarios_can_run_with_a_reachable_server(toxiproxy: Any, tmp_path: Path) -> None:
    """A configured server that answers: nothing in the way."""
    assert await toxiproxy_unavailable(settings(tmp_path, toxiproxy_url=toxiproxy.url)) is None


async def test_an_unreachable_configured_server_is_the_reason_given(tmp_path: Path) -> None:
    """A configured server that does not answer is named as the reason (the demo prints it when skipping)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    reason = await toxiproxy_unavailable(settings(tmp_path, toxiproxy_url=url, toxiproxy_timeout_s=0.5))
    assert reason is not None
    assert url in reason


async def test_a_missing_binary_is_the_reason_given(tmp_path: Path) -> None:
    """No server configured and no binary where it was said to be: the reason says how to get one."""
    reason = await toxiproxy_unavailable(settings(tmp_path, toxiproxy_bin=tmp_path / "no-such-binary"))
    assert reason is not None
    assert "make toxiproxy" in reason
    assert "CLIFFWATCH_TOXIPROXY_URL" in reason
