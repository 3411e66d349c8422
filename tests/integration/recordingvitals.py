"""A service's loops as it asks for them, none started: what a test of a service's wiring reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

from shared.ops.vitals import Vitals


class RecordingVitals(Vitals):
    """The loops a service asks for (name -> period; None: a background loop), none started."""

    def __init__(self) -> None:
        super().__init__()
        self.loops: dict[str, float | None] = {}

    def periodic(self, stack: AsyncExitStack, name: str, seconds: float, fn: Callable[[], Awaitable[None]]) -> None:
        self.loops[name] = seconds

    def background(self, stack: AsyncExitStack, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        self.loops[name] = None
