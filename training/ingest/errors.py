"""The error for bad trace data: it names the file, line, column and value at fault."""

from __future__ import annotations

from placement.model.errors import InputError


class DataError(InputError):
    """A trace file (or table) that cannot be used as it is."""
