"""shared.ops.vitals: loops that survive failing rounds, health that says the truth, fatal endings that stop."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest
from structlog.testing import capture_logs

from shared.ops import vitals as vitals_module
from shared.ops.vitals import HealthReport, Vitals, backoff, describe

pytestmark = pytest.mark.unit

# The schedule the docs' Reliability page promises (read before any test makes it quick).
SHIPPED = {name: getattr(vitals_module, name) for name in
           ("RETRY_FIRST_SECONDS", "RETRY_MAX_SECONDS", "CHECK_SECONDS", "REMIND_SECONDS", "STUCK_SECONDS")}


def test_the_shipped_timings_are_the_readmes() -> None:
    """0.5, 1, 2, 4, 5 s between tries; a 2 s health check; a reminder a minute; stuck after 120 s."""
    assert SHIPPED == {"RETRY_FIRST_SECONDS": 0.5, "RETRY_MAX_SECONDS": 5.0, "CHECK_SECONDS": 2.0,
                       "REMIND_SECONDS": 60.0, "STUCK_SECONDS": 120.0}


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vitals_module, "RETRY_FIRST_SECONDS", 0.01)
    monkeypatch.setattr(vitals_module, "RETRY_MAX_SECONDS", 0.04)
    monkeypatch.setattr(vitals_module, "CHECK_SECONDS", 0.2)


@pytest.mark.parametrize(("failures", "period", "seconds"), [
    (1, None, 0.5), (2, None, 1.0), (3, None, 2.0), (4, None, 4.0), (5, None, 5.0), (40, None, 5.0),
    (1, 10.0, 0.5), (3, 1.5, 1.5), (9, 2.0, 2.0),
])
def test_backoff_doubles_up_to_its_cap_and_never_past_the_period(
        failures: int, period: float | None, seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vitals_module, "RETRY_FIRST_SECONDS", SHIPPED["RETRY_FIRST_SECONDS"])
    monkeypatch.setattr(vitals_module, "RETRY_MAX_SECONDS", SHIPPED["RETRY_MAX_SECONDS"])
    assert backoff(failures, period) == seconds


def test_a_failing_loop_is_reminded_once_a_reminder_period_not_once_a_round(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(vitals_module.time, "monotonic", lambda: clock[0])
    state = vitals_module.LoopState("heartbeat")
    with capture_logs() as logs:
        for _ in range(50):  # 50 failures over 49 s: said once
            state.failed(ConnectionError("database unreachable"))
            clock[0] += 1
        clock[0] += 11  # past the minute since it was first said
        state.failed(ConnectionError("database unreachable"))
        state.failed(ConnectionError("database unreachable"))
    said = [e["event"] for e in logs]
    assert said == ["loop failing; trying again with backoff", "loop still failing"]
    assert logs[1]["failing_seconds"] == 61


def test_an_error_is_described_on_one_bounded_line() -> None:
    assert describe(ConnectionError("refused\n  by peer")) == "ConnectionError: refused by peer"
    assert len(describe(RuntimeError("x" * 5000))) < 350
    assert describe(TimeoutError()) == "TimeoutError: (no message)"


async def until(condition: object, limit: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def test_a_periodic_loop_survives_failing_rounds_says_so_once_and_resumes() -> None:
    vitals = Vitals()
    rounds: list[str] = []
    outage = asyncio.Event()
    outage.set()

    async def work() -> None:
        if outage.is_set():
            rounds.append("failed")
            raise ConnectionError("database unreachable")
        rounds.append("ok")

    with capture_logs() as logs:
        async with AsyncExitStack() as stack:
            vitals.periodic(stack, "reconcile", 0.02, work)
            await until(lambda: rounds.count("failed") >= 5)
            report = await vitals.report()
            assert report.status == "unhealthy" and report.http_status == 503
            assert report.reason is not None and report.reason.startswith("reconcile: failing for")
            assert "ConnectionError: database unreachable" in report.loops["reconcile"]
            outage.clear()
            await until(lambda: rounds[-1:] == ["ok"])
            await until(lambda: rounds.count("ok") >= 3)
            report = await vitals.report()
            assert (report.status, report.loops) == ("ok", {"reconcile": "ok"})
        assert (await vitals.report()).loops == {}, "a loop whose stack closed is no longer reported"
    said = [(e["event"], e.get("loop")) for e in logs]
    assert said.count(("loop failing; trying again with backoff", "reconcile")) == 1
    assert said.count(("loop resumed", "reconcile")) == 1


async def test_a_background_loop_that_raises_is_run_again() -> None:
    vitals = Vitals()
    starts = 0

    async def follow() -> None:
        nonlocal starts
        starts += 1
        if starts < 3:
            raise ConnectionError("stream broken")
        vitals.ok("follow")
        await asyncio.Event().wait()  # runs until cancelled

    async with AsyncExitStack() as stack:
        vitals.background(stack, "follow", follow)
        await until(lambda: starts == 3)
        await until(lambda: vitals._loops["follow"].failing_since is None)
        assert (await vitals.report()).status == "ok"


async def test_a_loop_that_ends_by_itself_is_fatal() -> None:
    vitals = Vitals()

    async def broken() -> None:
        await asyncio.sleep(0)  # returns: a bug in a loop meant to run until cancelled

    async with AsyncExitStack() as stack:
        vitals.background(stack, "follow", broken)
        reason = await asyncio.wait_for(vitals.wait_fatal(), 5)
        assert reason == ("loop follow ended: RuntimeError: follow returned; it is meant to run until the process "
                          "stops")
        report = await vitals.report()
        assert report.status == "unhealthy" and report.loops["follow"].startswith("ended: RuntimeError")


async def test_a_round_that_raises_a_bug_is_retried_and_reported_not_fatal() -> None:
    vitals = Vitals()

    async def buggy_round() -> None:
        raise KeyError("bug")

    async with AsyncExitStack() as stack:
        vitals.periodic(stack, "round", 0.01, buggy_round)
        await until(lambda: vitals._loops["round"].failures >= 3)
        assert "KeyError: 'bug'" in (await vitals.report()).loops["round"]
        fatal = asyncio.ensure_future(vitals.wait_fatal())
        await asyncio.sleep(0.05)
        assert not fatal.done()
        fatal.cancel()


async def test_checks_failing_or_silent_make_the_process_unhealthy_with_the_first_problem() -> None:
    vitals = Vitals()
    broker_up = True

    async def database() -> None:
        await asyncio.sleep(10)  # no answer

    async def broker() -> None:
        if not broker_up:
            raise ConnectionError("not connected to RabbitMQ")

    vitals.add_check("broker", broker)
    report = await vitals.report()
    assert report == HealthReport(status="ok", checks={"broker": "ok"}, loops={})
    vitals.add_check("database", database)
    broker_up = False
    report = await vitals.report()
    assert report.status == "unhealthy" and report.http_status == 503
    assert report.checks == {"broker": "ConnectionError: not connected to RabbitMQ",
                             "database": "no answer within 0.2 s"}
    assert report.reason == "broker: ConnectionError: not connected to RabbitMQ"


async def test_roles_are_reported() -> None:
    vitals = Vitals()
    vitals.roles["scheduler"] = "standby"
    report = await vitals.report()
    assert (report.status, report.roles) == ("ok", {"scheduler": "standby"})


async def test_fail_is_fatal_once_with_the_first_reason() -> None:
    vitals = Vitals()
    waiting = asyncio.ensure_future(vitals.wait_fatal())
    await asyncio.sleep(0)
    vitals.fail("the embedded database exited with code 1")
    vitals.fail("something later")
    assert await asyncio.wait_for(waiting, 1) == "the embedded database exited with code 1"
    assert await vitals.wait_fatal() == "the embedded database exited with code 1"


async def test_a_check_is_never_cancelled_and_a_running_one_is_not_started_twice() -> None:
    """PyMongo's async client can wedge when its calls are cancelled: /healthz stops waiting, not the check."""
    vitals = Vitals()
    started: list[int] = []
    release = asyncio.Event()

    async def slow_database() -> None:
        started.append(1)
        await release.wait()

    vitals.add_check("database", slow_database)
    first = await vitals.report()
    second = await vitals.report()
    assert first.checks["database"] == "no answer within 0.2 s"
    assert second.checks["database"].startswith("no answer for "), second.checks  # the same check, still waited on
    assert started == [1], "the check still running was waited for again, not started a second time"
    release.set()
    await asyncio.sleep(0)
    assert (await vitals.report()).checks["database"] == "ok"
    assert started == [1, 1]


async def test_a_round_that_never_returns_makes_livez_fail_but_a_failing_one_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vitals_module, "STUCK_SECONDS", 0.2)
    vitals = Vitals()
    hang = asyncio.Event()

    async def failing() -> None:
        raise ConnectionError("database unreachable")

    async def hanging() -> None:
        await hang.wait()

    async with AsyncExitStack() as stack:
        vitals.periodic(stack, "failing", 0.01, failing)
        await asyncio.sleep(0.3)
        assert vitals.liveness().status == "ok", "failing rounds return: the process is alive"
        assert (await vitals.report()).status == "unhealthy"
        vitals.periodic(stack, "hanging", 0.01, hanging)
        await until(lambda: vitals.liveness().status == "unhealthy", 2)
        live = vitals.liveness()
        assert live.reason is not None and live.reason.startswith("hanging: stuck: a round has not returned for")
        assert vitals.stuck_seconds() > 0
        hang.set()
        await until(lambda: vitals.liveness().status == "ok", 2)


async def test_a_check_that_never_returns_makes_livez_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vitals_module, "STUCK_SECONDS", 0.3)
    vitals = Vitals()
    never = asyncio.Event()

    async def wedged() -> None:
        await never.wait()

    vitals.add_check("database", wedged)
    await vitals.report()
    assert vitals.liveness().status == "ok"
    await asyncio.sleep(0.35)
    live = vitals.liveness()
    assert live.status == "unhealthy" and live.reason is not None and "check database: stuck" in live.reason
    never.set()


async def test_a_process_stuck_long_enough_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vitals_module, "STUCK_SECONDS", 0.1)
    vitals = Vitals()
    never = asyncio.Event()

    async def hanging() -> None:
        await never.wait()

    async with AsyncExitStack() as stack:
        vitals.periodic(stack, "hanging", 0.01, hanging)
        vitals.watch_stuck(stack)
        reason = await asyncio.wait_for(vitals.wait_fatal(), 3)
        assert reason.startswith("stuck: hanging: stuck")
        vitals.stopping = True  # as wait_for_shutdown says: the hung round is cancelled, not waited for


async def test_a_loop_stopped_while_the_process_goes_on_lets_its_round_finish_first() -> None:
    """A database call is never cancelled when a loop is stopped but the process goes on (a scheduler standing
    by): cancelled calls can wedge PyMongo's async client. At shutdown the round is cancelled at once."""
    vitals = Vitals()
    release = asyncio.Event()
    finished: list[str] = []

    async def round_() -> None:
        await release.wait()
        finished.append("round")

    stack = AsyncExitStack()
    vitals.periodic(stack, "lease", 0.01, round_)
    await until(lambda: vitals._loops["lease"].round_since is not None)
    closing = asyncio.ensure_future(stack.aclose())
    await asyncio.sleep(0.05)
    assert not closing.done(), "the stop waits for the round in flight"
    release.set()
    await asyncio.wait_for(closing, 2)
    assert finished == ["round"], "the round finished; it was not cancelled"

    release.clear()
    stack = AsyncExitStack()
    vitals.periodic(stack, "lease", 0.01, round_)
    await until(lambda: vitals._loops["lease"].round_since is not None)
    vitals.stopping = True
    await asyncio.wait_for(stack.aclose(), 1)
    assert finished == ["round"], "stopping: the round was cancelled"


async def test_a_loop_started_again_under_its_name_is_reported_after_the_old_one_is_cancelled() -> None:
    """A scheduler that stands by and leads again restarts its loops under the same names: the old loops'
    cancellation must not take the new ones out of /healthz."""
    vitals = Vitals()

    async def work() -> None:
        return None

    first = AsyncExitStack()
    vitals.periodic(first, "lease", 10, work)  # no round within the test: only registration keeps it listed
    closing = asyncio.ensure_future(first.aclose())
    second = AsyncExitStack()
    vitals.periodic(second, "lease", 10, work)
    await closing
    await asyncio.sleep(0.05)
    assert (await vitals.report()).loops == {"lease": "ok"}
    await second.aclose()
    await asyncio.sleep(0)
    assert (await vitals.report()).loops == {}


async def test_a_start_says_starting_and_a_hung_start_fails_livez(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vitals_module, "STUCK_SECONDS", 0.2)
    vitals = Vitals()
    gate = asyncio.Event()

    async def start() -> None:
        async with vitals.starting("status-start"):
            await gate.wait()

    task = asyncio.ensure_future(start())
    await asyncio.sleep(0.05)
    report = await vitals.report()
    assert (report.status, report.reason) == ("unhealthy", "status-start: starting")
    assert vitals.liveness().status == "ok"
    await asyncio.sleep(0.25)
    assert vitals.liveness().status == "unhealthy"
    gate.set()
    await task
    assert (await vitals.report()).status == "ok" and vitals.liveness().status == "ok"
