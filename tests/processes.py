"""Stopping a server a test started in a process group of its own (it may have started children)."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import IO


def stop_group(process: subprocess.Popen[bytes], log: IO[bytes] | None = None, grace_s: float = 20) -> None:
    """SIGTERM to the whole group, SIGKILL if it has not ended within ``grace_s``; then close its log."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if log is not None:
        log.close()
