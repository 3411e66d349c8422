"""The launcher's work in flight (services.launcher.inflight): a second request joins the first."""

from __future__ import annotations

import asyncio

import pytest

from services.launcher.inflight import InFlight, Joined

pytestmark = pytest.mark.unit


async def test_a_second_request_joins_the_work_in_flight_and_done_work_is_forgotten() -> None:
    work: Joined[str, int] = Joined()
    release = asyncio.Event()
    starts = 0

    async def job() -> int:
        nonlocal starts
        starts += 1
        await release.wait()
        return starts

    first = work.join("a", "a", job)
    second = work.join("a", "a", job)
    assert first is second and "a" in work and work.get("a") is first
    release.set()
    assert await first == 1
    await asyncio.sleep(0)
    assert "a" not in work and work.get("a") is None
    assert await work.join("a", "a", job) == 2


async def test_a_recorder_runs_once_per_container_until_it_ends() -> None:
    work = InFlight()
    release = asyncio.Event()
    started: list[str] = []

    async def record(name: str) -> None:
        started.append(name)
        await release.wait()

    work.record("c1", lambda: record("first"))
    work.record("c1", lambda: record("second"))
    await asyncio.sleep(0)
    assert started == ["first"] and work.has_recorder("c1")
    release.set()
    await asyncio.sleep(0)
    work.record("c1", lambda: record("again"))  # the first one ended: a new one takes over
    taken = work.take_recorder("c1")
    assert taken is not None
    await taken
    assert started == ["first", "again"] and not work.has_recorder("c1")


async def test_what_is_remembered_about_a_container_until_it_ended() -> None:
    work = InFlight()
    work.mark_stopped_by_user("c1")
    assert work.was_stopped_by_user("c1") and not work.was_stopped_by_user("c2")
    assert work.first_kept_announcement("c1") and not work.first_kept_announcement("c1")
    work.started_announced("c1")
    assert work.was_started_announced("c1") and not work.was_started_announced("c2")
    work.started_unannounced("c1")
    assert not work.was_started_announced("c1")
    work.started_announced("c1")
    with work.stopping("c1"):
        assert work.is_stopping("c1")
    assert not work.is_stopping("c1")
    work.ended("c1")
    assert not work.was_stopped_by_user("c1") and work.first_kept_announcement("c1")
    assert not work.was_started_announced("c1")


async def test_close_cancels_the_work_in_flight() -> None:
    work = InFlight()
    never = asyncio.Event()
    spawned = work.spawn("bg", never.wait())
    joined = work.launches.join("c", "c", lambda: asyncio.sleep(3600))
    await work.close()
    assert spawned.cancelled() and joined.cancelled()
