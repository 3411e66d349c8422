"""The threads the docker SDK's blocking calls run on: a bounded pool of the launcher's own, never the event
loop's default executor.

That executor has a few threads (six on two cores) that the database client needs (PyMongo's async client
resolves and connects through ``loop.getaddrinfo``) and so does the API (bcrypt of a login): a hung engine
holding them stalled the whole of ``paiq up``. Here a call beyond the pool's size waits its turn, and only
other engine calls wait with it.

Daemon threads, unlike a ``ThreadPoolExecutor``'s (which the interpreter joins at exit): a call stuck on a
hung engine (a pull has no deadline) never holds up the process's exit.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")

_Work = tuple[Future[Any], Callable[[], Any]]


class EngineThreads(Executor):
    """At most ``size`` daemon threads named ``name-N``, started as work comes and kept for the next."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self.name} threads are shut down")
            self._work.put((future, lambda: fn(*args, **kwargs)))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.size:
                thread = threading.Thread(target=self._serve, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, call = item
            if future.set_running_or_notify_cancel():  # False: its caller gave up while it queued
                try:
                    future.set_result(call())
                except BaseException as e:  # handed to the caller, as a ThreadPoolExecutor does
                    future.set_exception(e)
            del future, call, item  # an idle thread keeps no finished call's result alive
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more work; ``cancel_futures``: what still queues is cancelled. Calls running finish (or hang) in
        their daemon threads; ``wait`` waits for them."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        if cancel_futures:
            with contextlib.suppress(queue.Empty):
                while True:
                    item = self._work.get_nowait()
                    if item is not None:
                        item[0].cancel()
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()
