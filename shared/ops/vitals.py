"""Whether a process does its work: its long-lived loops, its dependencies, and the health it reports.

Every long-lived loop of a service (periodic passes, lease, event follow, heartbeat) runs under the
process's :class:`Vitals`. A round that fails, typically because the database or the broker is away, is
logged once, tried again with backoff, and its recovery logged: the loop never dies of it. ``/healthz``
answers ok only while every dependency check passes (database, broker) and no loop is failing; a
scheduler standing by says so. A loop that ends by itself (a bug, not an outage) is fatal: the process
stops and exits non-zero, so that its supervisor restarts it instead of it looking alive doing nothing.

A failing loop is alive (it gets answers, bad ones); a loop whose round never returns is not. Every
database call is bounded by the driver's own deadline (``PAIQ_MONGODB_TIMEOUT_SECONDS``), so a round
that runs far past it, or a dependency check that has not returned long after its bound, means a wedged
client or a hung call: ``/livez`` turns 503 (a liveness probe restarts the process, with a fresh client),
and a process left in that state for ``STUCK_FATAL_FACTOR`` times as long stops by itself.
Checks are never cancelled: PyMongo's async client can be left unusable when its operations are
cancelled mid-flight (``../shared/repro``: seen wedged after ``asyncio.timeout`` cancelled pings during an
outage), so ``/healthz`` stops waiting for a slow check without cancelling it, and reuses it while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict
from pymongo.errors import ConnectionFailure, PyMongoError

from shared.errors import BusError

log = structlog.get_logger("paiq.vitals")

Check = Callable[[], Awaitable[None]]
Round = Callable[[], Awaitable[None]]

# A failing loop tries again after 0.5 s, then 1, 2, 4 ... never later than this (nor than its period).
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 5.0
# How long a dependency check may take before it counts as failed (/healthz answers within this).
CHECK_SECONDS = 2.0
# A loop failing this long is said again in the log (once a minute, not once a round).
REMIND_SECONDS = 60.0
# How many characters of an error a log line or /healthz quotes.
ERROR_CHARS = 300
# A round running longer than this (or its loop's period times STUCK_PERIODS, whichever is longer) is stuck;
# a dependency check pending this long, too. The database's own deadline (30 s by default) is well within.
STUCK_SECONDS = 120.0
STUCK_PERIODS = 5
# A process stuck this many times the stuck bound stops (exit 1), for supervisors that do not probe /livez.
STUCK_FATAL_FACTOR = 3
# A loop stopped while the process goes on (a scheduler standing by) first lets its round in flight finish,
# for at most this long: past every database call's own deadline (30 s by default).
ROUND_GRACE_SECONDS = 40.0


def describe(error: BaseException) -> str:
    """One line for an operator: the error's type and its message, bounded."""
    text = " ".join(str(error).split()) or "(no message)"
    if len(text) > ERROR_CHARS:
        text = text[:ERROR_CHARS] + "..."
    return f"{type(error).__name__}: {text}"


def is_outage(error: BaseException) -> bool:
    """Whether ``error`` says the database or the broker is away (to wait out), not that the work is wrong:
    MongoDB's connection failures (server selection, network, timeouts), the bus's, and those wrapped."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ConnectionFailure | BusError | ConnectionError):
            return True
        if isinstance(seen, PyMongoError) and seen.timeout:  # the driver's deadline passed (timeoutMS)
            return True
        seen = seen.__cause__
    return False


def backoff(failures: int, period: float | None = None) -> float:
    """Seconds to wait after the ``failures``-th failure in a row (from 1)."""
    delay: float = min(RETRY_FIRST_SECONDS * 2.0 ** (failures - 1), RETRY_MAX_SECONDS)
    return delay if period is None else min(delay, period)


@dataclass
class LoopState:
    """What a loop did last: ``failing_since`` is the monotonic time of the first failure of a streak."""

    name: str
    failures: int = 0
    failing_since: float | None = None
    error: str = ""
    reminded: float = 0.0
    ended: str | None = None
    round_since: float | None = None  # monotonic start of the round running now (periodic loops and passes)
    stuck_after: float = field(default_factory=lambda: STUCK_SECONDS)
    task: asyncio.Task[None] | None = None
    stuck_said: bool = False
    between_rounds: asyncio.Event = field(default_factory=asyncio.Event)  # set while no round runs
    stopping: bool = False  # Vitals._stop waits for the round in flight: no new one starts

    def failed(self, error: BaseException) -> None:
        now = time.monotonic()
        self.failures += 1
        self.error = describe(error)
        if self.failing_since is None:
            self.failing_since, self.reminded = now, now
            log.warning("loop failing; trying again with backoff", loop=self.name, error=self.error)
        elif now - self.reminded >= REMIND_SECONDS:
            self.reminded = now
            log.warning("loop still failing", loop=self.name, error=self.error,
                        failing_seconds=round(now - self.failing_since))

    def succeeded(self) -> None:
        if self.failing_since is not None:
            log.info("loop resumed", loop=self.name, failing_seconds=round(time.monotonic() - self.failing_since, 1),
                     failures=self.failures)
        self.failures, self.failing_since, self.error = 0, None, ""

    def health(self) -> str:
        if self.ended is not None:
            return f"ended: {self.ended}"
        stuck = self.stuck_for()
        if stuck is not None:
            return f"stuck: a round has not returned for {stuck:.0f} s"
        if self.failing_since is not None:
            return f"failing for {time.monotonic() - self.failing_since:.0f} s: {self.error}"
        return self.error or "ok"  # "starting" while a service starts (Vitals.starting)

    def stuck_for(self) -> float | None:
        """How long the running round has run, once that is past the stuck bound."""
        if self.round_since is None:
            return None
        running = time.monotonic() - self.round_since
        return running if running > self.stuck_after else None


class HealthReport(BaseModel):
    """``/healthz``'s answer: 200 when ``status`` is ok, else 503 with the first problem as ``reason``."""

    model_config = ConfigDict(frozen=True)

    status: Literal["ok", "unhealthy"]
    reason: str | None = None
    roles: dict[str, str] = {}
    checks: dict[str, str]
    loops: dict[str, str]

    @property
    def http_status(self) -> int:
        return 200 if self.status == "ok" else 503


class Vitals:
    """One per process (``paiq up``: one for all the services it hosts)."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}
        self._loops: dict[str, LoopState] = {}
        self.roles: dict[str, str] = {}
        self._fatal: asyncio.Future[str] | None = None
        self._pending: dict[str, asyncio.Task[None]] = {}
        self.stopping = False  # the process is shutting down: loops are cancelled at once
        self._pending_since: dict[str, float] = {}

    # --- what /healthz checks ---------------------------------------------------------------------------

    def add_check(self, name: str, check: Check) -> None:
        """``check`` raises while the dependency ``name`` cannot be used."""
        self._checks[name] = check

    async def report(self) -> HealthReport:
        results = await asyncio.gather(*(self._run_check(name, check) for name, check in self._checks.items()))
        checks = dict(zip(self._checks, results, strict=True))
        loops = {name: state.health() for name, state in self._loops.items()}
        problems = [f"{name}: {result}" for name, result in (*checks.items(), *loops.items()) if result != "ok"]
        return HealthReport(status="unhealthy" if problems else "ok", reason=problems[0] if problems else None,
                            roles=dict(self.roles), checks=checks, loops=loops)

    async def _run_check(self, name: str, check: Check) -> str:
        """The check's answer within CHECK_SECONDS. Never cancelled: one still running is waited for again
        by the next report instead of being started twice (the check bounds itself, e.g. with the driver's
        own deadline)."""
        pending = self._pending.get(name)
        if pending is None or pending.done():
            pending = self._pending[name] = asyncio.create_task(_awaited(check), name=f"check-{name}")
            pending.add_done_callback(_seen)  # its failure is read here or by the next report, never "lost"
            self._pending_since[name] = time.monotonic()
        done, _ = await asyncio.wait({pending}, timeout=CHECK_SECONDS)
        if not done:
            waited = time.monotonic() - self._pending_since[name]
            return f"no answer within {CHECK_SECONDS:g} s" if waited < CHECK_SECONDS * 2 else \
                f"no answer for {waited:.1f} s"
        error = pending.exception()
        return "ok" if error is None else describe(error)

    def _stuck_checks(self) -> dict[str, float]:
        now = time.monotonic()
        return {name: now - self._pending_since[name] for name, task in self._pending.items()
                if not task.done() and now - self._pending_since[name] > STUCK_SECONDS}

    def liveness(self) -> HealthReport:
        """``/livez``: whether the process should be restarted. Unlike /healthz it does not depend on the
        database or the broker answering (a liveness probe that did would restart every pod during an
        outage that a restart cannot cure): unhealthy once a loop has ended, a loop's round has not returned
        for far longer than any bounded call takes, or a dependency check has not returned at all (a
        wedged client, which only a fresh process cures)."""
        dead = {name: state.health() for name, state in self._loops.items()
                if state.ended is not None or state.stuck_for() is not None}
        dead.update({f"check {name}": f"stuck: not returned for {seconds:.0f} s"
                     for name, seconds in self._stuck_checks().items()})
        reason = next((f"{name}: {health}" for name, health in dead.items()), None)
        return HealthReport(status="unhealthy" if dead else "ok", reason=reason, roles=dict(self.roles),
                            checks={}, loops=dead)

    def stuck_seconds(self) -> float:
        """How long the longest-stuck round or check has been stuck beyond its bound (0 when none is)."""
        over = [running - state.stuck_after for state in self._loops.values()
                if (running := state.stuck_for()) is not None]
        over += [seconds - STUCK_SECONDS for seconds in self._stuck_checks().values()]
        return max(over, default=0.0)

    # --- supervised loops -------------------------------------------------------------------------------

    def periodic(self, stack: AsyncExitStack, name: str, seconds: float, fn: Round) -> None:
        """Run ``fn`` every ``seconds`` until ``stack`` closes; a failing round is tried again with backoff."""
        state = self._state(name)
        state.stuck_after = max(STUCK_SECONDS, STUCK_PERIODS * seconds)

        async def loop() -> None:
            delay = seconds
            while True:
                await asyncio.sleep(delay)
                try:
                    async with self.round(name):
                        await fn()
                except Exception as e:  # not CancelledError (a BaseException): the stack closing ends it
                    state.failed(e)
                    delay = backoff(state.failures, seconds)
                else:
                    state.succeeded()
                    delay = seconds

        self._start(stack, name, loop())

    def background(self, stack: AsyncExitStack, name: str, fn: Round) -> None:
        """Run ``fn`` (meant to run until cancelled) until ``stack`` closes; if it raises, run it again after
        a backoff. ``fn`` calls :meth:`ok` (e.g. once connected) to say it works again after failures."""
        state = self._state(name)

        async def loop() -> None:
            while True:
                try:
                    await fn()
                except Exception as e:
                    state.failed(e)
                    await asyncio.sleep(backoff(state.failures))
                    continue
                raise RuntimeError(f"{name} returned; it is meant to run until the process stops")

        self._start(stack, name, loop())

    @contextlib.asynccontextmanager
    async def round(self, name: str) -> AsyncIterator[None]:
        """One round of the loop ``name``: while it runs, /livez watches that it returns."""
        state = self._state(name)
        if state.stopping:
            raise asyncio.CancelledError  # the loop is being stopped: no new round (Vitals._stop)
        state.round_since = time.monotonic()
        state.between_rounds.clear()
        try:
            yield
        finally:
            state.round_since = None
            state.between_rounds.set()

    @contextlib.asynccontextmanager
    async def starting(self, name: str) -> AsyncIterator[None]:
        """A service's start: /healthz says ``starting`` meanwhile, and /livez fails if it hangs (a stuck round)."""
        state = self._state(name)
        state.error = "starting"
        try:
            async with self.round(name):
                yield
        finally:
            self._loops.pop(name, None)

    def watch_stuck(self, stack: AsyncExitStack) -> None:
        """Stop the process (exit 1) once a round or check has been stuck STUCK_FATAL_FACTOR times its bound:
        /livez has said so all along, and a supervisor that does not probe it still restarts an exited one."""
        async def watch() -> None:
            while True:
                await asyncio.sleep(STUCK_SECONDS / 4)
                self._say_stuck()
                if self.stuck_seconds() > (STUCK_FATAL_FACTOR - 1) * STUCK_SECONDS:
                    self.fail(f"stuck: {self.liveness().reason}")

        self._start(stack, "stuck-watch", watch())

    def _say_stuck(self) -> None:
        """Log once per stuck round where it waits (its chain of awaits), for whoever reads why /livez fails."""
        for state in self._loops.values():
            running = state.stuck_for()
            if running is None:
                state.stuck_said = False
            elif not state.stuck_said:
                state.stuck_said = True
                log.error("a loop's round has not returned; /livez fails until it does", loop=state.name,
                          running_seconds=round(running), waiting_in=awaiting(state.task))

    def ok(self, name: str) -> None:
        """The loop ``name`` works (again)."""
        self._state(name).succeeded()

    def failed(self, name: str, error: BaseException) -> None:
        """The loop ``name`` failed a round that it tries again by itself."""
        self._state(name).failed(error)

    def _state(self, name: str) -> LoopState:
        return self._loops.setdefault(name, LoopState(name))

    def _start(self, stack: AsyncExitStack, name: str, coro: Awaitable[None]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.create_task(run(), name=name)
        if name in self._loops:
            self._loops[name].task, self._loops[name].stopping = task, False
        task.add_done_callback(lambda t: self._ended(name, t))
        stack.push_async_callback(self._stop, name, task)

    async def _stop(self, name: str, task: asyncio.Task[None]) -> None:
        """End a loop whose stack closes. Unless the process is stopping, a round in flight is let finish
        first (bounded by ROUND_GRACE_SECONDS): cancelling a database call can wedge PyMongo's async client
        (a scheduler that stands by while its rounds wait out an outage would otherwise do just that)."""
        state = self._loops.get(name)
        if not self.stopping and state is not None and state.task is task and state.round_since is not None:
            state.stopping = True
            between = asyncio.ensure_future(state.between_rounds.wait())
            await asyncio.wait({task, between}, timeout=ROUND_GRACE_SECONDS, return_when=asyncio.FIRST_COMPLETED)
            between.cancel()
        await _cancel(task)

    def _ended(self, name: str, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            state = self._loops.get(name)
            if state is not None and state.task in (task, None):  # not a loop of that name started since
                self._loops.pop(name)
            return
        error = task.exception()
        reason = describe(error) if error else "returned"
        self._state(name).ended = reason
        self.fail(f"loop {name} ended: {reason}")

    # --- fatal ------------------------------------------------------------------------------------------

    def fail(self, reason: str) -> None:
        """Something this process cannot go on without is gone: it stops and exits non-zero."""
        log.error("fatal: the process stops so that its supervisor restarts it", reason=reason)
        if self._fatal is None:
            self._fatal = asyncio.get_running_loop().create_future()
        if not self._fatal.done():
            self._fatal.set_result(reason)

    async def wait_fatal(self) -> str:
        """Return the reason once :meth:`fail` was called."""
        if self._fatal is None:
            self._fatal = asyncio.get_running_loop().create_future()
        return await asyncio.shield(self._fatal)


def awaiting(task: asyncio.Task[None] | None, limit: int = 40) -> list[str]:
    """Where a task waits: its chain of awaited coroutines, outermost first (``file:line function``)."""
    chain: list[str] = []
    coro: Any = task.get_coro() if task is not None else None
    while coro is not None and len(chain) < limit:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            chain.append(repr(coro)[:120])
            break
        chain.append(f"{frame.f_code.co_filename.rsplit('/site-packages/', 1)[-1]}:{frame.f_lineno} "
                     f"{frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain


def _seen(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


async def _awaited(check: Check) -> None:
    await check()


async def _cancel(task: asyncio.Task[None]) -> None:
    if task.done():
        return  # it ended by itself: already reported as fatal (see Vitals._ended)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
