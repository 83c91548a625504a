"""Child processes that cannot outlive cliffwatch: the built-in target and a managed Toxiproxy.

On Linux a child started with ``preexec_fn=die_with_parent`` gets SIGKILL from the kernel the moment its
parent dies, however it dies — ``kill -9`` included — so a crashed run leaves no simulator holding a port
and no Toxiproxy holding a toxic. Elsewhere it is a no-op, and the normal shutdown path stops children.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Runs in the child between fork and exec: asks the kernel to SIGKILL it when the parent exits."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not fatal: the child then relies on the parent's normal shutdown
    # The parent may have died between fork and prctl; then nobody would ever signal us.
    if os.getppid() == 1:
        os._exit(1)
