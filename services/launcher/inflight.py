"""The launcher's work in flight: what this process is doing right now, so it never does a thing twice
at once.

Nothing here must survive a crash: Docker (containers, by label and deterministic name) and MongoDB
(jobs, and the task runs of :mod:`shared.db.logs`) hold what does, and the reconcile pass finds it
again. Each kind of work is keyed so that a second request joins the first.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import structlog

from shared.db.logs import LogEnd

log = structlog.get_logger("paiq.launcher")

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
SSHD_IMAGES = 256  # images whose sshd look-up a launcher remembers


class Joined(Generic[K, T]):
    """Work by key: a second request for a key joins the work in flight; done work is forgotten."""

    def __init__(self) -> None:
        self._tasks: dict[K, asyncio.Task[T]] = {}

    def __contains__(self, key: K) -> bool:
        return key in self._tasks

    def get(self, key: K) -> asyncio.Task[T] | None:
        return self._tasks.get(key)

    def join(self, key: K, name: str, start: Callable[[], Coroutine[Any, Any, T]]) -> asyncio.Task[T]:
        """The work in flight for ``key``, or ``start()`` begun now (called only then)."""
        current = self._tasks.get(key)
        if current is None:
            current = asyncio.create_task(start(), name=name)
            self._tasks[key] = current
            current.add_done_callback(lambda done: self._forget(key, done))
        return current

    def _forget(self, key: K, done: asyncio.Task[T]) -> None:
        if self._tasks.get(key) is done:
            del self._tasks[key]

    def tasks(self) -> list[asyncio.Task[T]]:
        return list(self._tasks.values())


class InFlight:
    """The work in flight of one launcher process, and the little it remembers about its containers."""

    def __init__(self) -> None:
        self.pulls: Joined[tuple[str, str], None] = Joined()  # by (image, authFile or the role whose auth)
        self.launches: Joined[str, None] = Joined()  # by container name; each publishes what came of it
        self.finishes: Joined[str, None] = Joined()  # by container id
        self._recorders: dict[str, asyncio.Task[LogEnd]] = {}  # by container id; kept until the exit takes it
        self._stopped_by_user: set[str] = set()  # container ids
        self._stopping: set[str] = set()  # container ids
        self._kept_announced: set[str] = set()  # container ids
        self._started_announced: set[str] = set()  # container ids whose task.started this process sent
        self._background: set[asyncio.Task[Any]] = set()
        self._sshd: OrderedDict[str, str | None] = OrderedDict()  # by image ID: its sshd's path (None: none)

    # --- what an image holds ---------------------------------------------------------------------

    def sshd_of(self, image_id: str | None) -> tuple[bool, str | None]:
        """Whether the image's sshd was looked for (an image's files never change), and where it is (None: none)."""
        if image_id is None or image_id not in self._sshd:
            return False, None
        return True, self._sshd[image_id]

    def found_sshd(self, image_id: str | None, path: str | None) -> None:
        """Remember where the image's sshd is (:data:`SSHD_IMAGES` images at most, the oldest let go first)."""
        if image_id is None:
            return
        self._sshd[image_id] = path
        if len(self._sshd) > SSHD_IMAGES:
            self._sshd.popitem(last=False)

    # --- recording a container's output -------------------------------------------------------

    def record(self, container_id: str, start: Callable[[], Coroutine[Any, Any, LogEnd]]) -> None:
        """Record a container's output with ``start()``, unless a recorder of it is running already."""
        current = self._recorders.get(container_id)
        if current is not None and not current.done():
            return
        self._recorders[container_id] = asyncio.create_task(start(), name=f"logs-{container_id[:12]}")

    def has_recorder(self, container_id: str) -> bool:
        """Whether this process took up the container's output (its recorder may have ended since)."""
        return container_id in self._recorders

    def take_recorder(self, container_id: str) -> asyncio.Task[LogEnd] | None:
        """The container's recorder, handed over to the exit path (which drains or cancels it)."""
        return self._recorders.pop(container_id, None)

    # --- what is remembered about a container until its exit is reported ----------------------

    def mark_stopped_by_user(self, container_id: str) -> None:
        self._stopped_by_user.add(container_id)

    def was_stopped_by_user(self, container_id: str) -> bool:
        return container_id in self._stopped_by_user

    @contextmanager
    def stopping(self, container_id: str) -> Iterator[None]:
        """While a stop of the container is under way (so the reconcile pass does not stop it again)."""
        self._stopping.add(container_id)
        try:
            yield
        finally:
            self._stopping.discard(container_id)

    def is_stopping(self, container_id: str) -> bool:
        return container_id in self._stopping

    def first_kept_announcement(self, container_id: str) -> bool:
        """True the first time an isDebug container's "kept for debugging" is seen, False after."""
        if container_id in self._kept_announced:
            return False
        self._kept_announced.add(container_id)
        return True

    def started_announced(self, container_id: str) -> None:
        """This process says the container's ``task.started`` (marked before it is published, so that a
        pass meanwhile does not say it too; :meth:`started_unannounced` when that publish fails)."""
        self._started_announced.add(container_id)

    def started_unannounced(self, container_id: str) -> None:
        self._started_announced.discard(container_id)

    def was_started_announced(self, container_id: str) -> bool:
        return container_id in self._started_announced

    def ended(self, container_id: str) -> None:
        """The container's exit is reported and it is removed: nothing about it is kept."""
        self._stopped_by_user.discard(container_id)
        self._kept_announced.discard(container_id)
        self._started_announced.discard(container_id)

    # --- background work ----------------------------------------------------------------------

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, kept referenced until done; a failure is logged."""
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background work of the launcher failed; the next reconcile pass retries it",
                      work=task.get_name(), error=repr(task.exception()))

    async def close(self) -> None:
        """Cancel the work in flight (containers keep running; the next start picks everything up)."""
        work: list[asyncio.Task[Any]] = [*self._background, *self._recorders.values(), *self.launches.tasks(),
                                          *self.finishes.tasks(), *self.pulls.tasks()]
        for task in work:
            task.cancel()
        await asyncio.gather(*work, return_exceptions=True)
