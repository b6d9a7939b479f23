"""The rich console the command line prints to: wide enough for its tables when not on a terminal."""

from __future__ import annotations

import sys

from rich.console import Console

PIPE_WIDTH = 160
"""Columns used when output goes to a file or pipe (rich would otherwise assume 80)."""


def make_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else PIPE_WIDTH)
