"""Child processes that cannot outlive cliffwatch: the built-in target and a managed Toxiproxy.

On Linux a child started with ``preexec_fn=die_with_parent()`` gets SIGKILL from the kernel the moment the
thread that started it dies — the whole process included, ``kill -9`` or not — so a crashed run leaves no
simulator holding a port and no Toxiproxy holding a toxic. Start such children from a thread that lives as
long as they should (the event loop's). Elsewhere it is a no-op and the normal shutdown path stops them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel to SIGKILL the child when its parent dies (None off Linux)."""
    if sys.platform != "linux":
        return None
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: the child only makes one call

    def in_child() -> None:
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")  # Popen re-raises it in the parent
        if os.getppid() != parent:  # the parent died before prctl: nobody would send the signal now
            os._exit(1)

    return in_child
