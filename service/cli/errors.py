"""Errors that are the user's to fix, each printed as one line naming what is wrong, with exit code 2.

Anything else is a bug and keeps its traceback. The modules a message needs (MLflow, pydantic) are only
looked at when already imported, so that this costs nothing at start-up.
"""

from __future__ import annotations

import re
import sys

EXIT_BAD_INPUT = 2


class CommandError(Exception):
    """What a command was given cannot be used: the message says what and where."""


def user_message(exc: BaseException) -> str | None:
    """The one-line message for ``exc`` if it is the user's to fix (bad input or settings, a missing file,
    model or version, a registry that cannot be reached), else ``None``."""
    from placement import InputError

    if isinstance(exc, CommandError | InputError):
        return str(exc)
    if isinstance(exc, KeyError):  # lookups by name (a source, a cluster, a policy) name what exists
        return str(exc.args[0]) if exc.args else repr(exc)
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError | PermissionError) \
            and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or type(exc).__name__}"
    registry = sys.modules.get("models.registry")
    if registry is not None and isinstance(exc, registry.ModelNotFound | registry.RegistryUnavailable):
        return str(exc.args[0]) if exc.args else str(exc)
    mlflow_errors = sys.modules.get("mlflow.exceptions")
    if mlflow_errors is not None and isinstance(exc, mlflow_errors.MlflowException):
        return f"model registry: {exc.message}"
    database = sys.modules.get("sqlalchemy.exc")
    if database is not None and isinstance(exc, database.ArgumentError | database.OperationalError):
        cause = getattr(exc, "orig", None) or exc
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return re.sub(r"//[^/@\s]+@", "//***@", f"state database: {first}")
    pydantic_core = sys.modules.get("pydantic_core")
    if pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError) and exc.title == "Settings":
        return "; ".join(f"setting GPUPLACE_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']} "
                         f"(got {e['input']!r})" for e in exc.errors())
    return None
