"""A pymongo command listener for tests that count what a client asks of the database: the commands it sent,
by name, and those the server failed, by error code (a write conflict's 112 runs a whole transaction again)."""

from __future__ import annotations

from collections import Counter

from pymongo import monitoring

WRITE_CONFLICT = 112


class CommandCounts(monitoring.CommandListener):
    """Give it to a client (``event_listeners=[counts]``); read ``sent`` and ``failed`` after."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()  # by command name (insert, commitTransaction, ...)
        self.failed_codes: Counter[int] = Counter()  # by the server's error code

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        if isinstance(event.failure, dict) and isinstance(code := event.failure.get("code"), int):
            self.failed_codes[code] += 1

    @property
    def conflicts(self) -> int:
        """Commands failed with a write conflict."""
        return self.failed_codes[WRITE_CONFLICT]
