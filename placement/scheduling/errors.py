"""The error for a queue configuration a person must fix: it names the file (or request), the line where
there is one, the field (``queues[team-a].quota.gpus``) and the value at fault."""

from __future__ import annotations

from placement.model.errors import InputError


class QueueConfigError(InputError):
    """A queue configuration that cannot be used as it is; ``column`` holds the field's path."""

    place_word = "field"

    @property
    def field(self) -> str | None:
        return self.column
