"""The launcher's log recorder (services/launcher/recorder.py) over a real store: what a quiet task costs it, how
soon a line is stored, and where the catch-up after an exit resumes.

The container's output comes from a stand-in for the engine's log stream (lines handed over by the test): the
recorder's own work, its timers and its writes to a real MongoDB-wire server, is what is under test.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from services.launcher.engine.driver import ContainerDriver, LogLine
from services.launcher.recorder import FLUSH_SECONDS, LogRecorder
from shared.db.logs import LogEnd, LogStore
from shared.db.store import Store, open_store
from shared.taskref import TaskRef

pytestmark = pytest.mark.integration


class Stream:
    """A container's log stream: the lines the test puts, until it ends (or breaks)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[LogLine | BaseException | None] = asyncio.Queue()
        self.since: list[int] = []

    async def follow_logs(self, container_id: str, since_ns: int = 0) -> AsyncIterator[LogLine]:
        self.since.append(since_ns)
        while (item := await self.queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item

    def say(self, text: str, ts_ns: int) -> None:
        self.queue.put_nowait(LogLine(stream="stdout", ts_ns=ts_ns, text=text))

    def end(self) -> None:
        self.queue.put_nowait(None)


class CountingLogs(LogStore):
    """The real log store, counting the reads a recorder resumes from."""

    def __init__(self, store: Store) -> None:
        super().__init__(store.jobs.database)
        self.reads = 0

    async def last_chunk(self, key: TaskRef) -> Any:
        self.reads += 1
        return await super().last_chunk(key)

    async def get_run(self, key: TaskRef) -> Any:
        self.reads += 1
        return await super().get_run(key)


@pytest.fixture
async def logs(mongo_uri: str) -> AsyncIterator[CountingLogs]:
    async with open_store(mongo_uri, f"recorder_{uuid.uuid4().hex[:8]}") as store:
        yield CountingLogs(store)


def recorder(logs: LogStore, stream: Stream, key: TaskRef, resume: LogEnd | None = None) -> LogRecorder:
    return LogRecorder(logs, cast(ContainerDriver, stream), key, "c-" + key.job_id, max_bytes=1 << 20, resume=resume)


def key_of(name: str) -> TaskRef:
    return TaskRef(job_id=f"{name}-{uuid.uuid4().hex[:6]}", attempt=1, role="main", index=0)


async def stored_lines(logs: LogStore, key: TaskRef) -> list[str]:
    return [line.text for chunk in await logs.chunks_after(key, -1) for line in chunk.lines]


async def test_quiet_tasks_cost_their_recorders_no_wake_up(logs: CountingLogs) -> None:
    """Found false: each recorder woke every FLUSH_SECONDS to look for lines (four timers a second per running
    task, with nothing to write: 400 a second for a node's 100 quiet training runs)."""
    streams = [Stream() for _ in range(50)]
    keys = [key_of("quiet") for _ in streams]
    tasks = [asyncio.create_task(recorder(logs, s, k).run()) for s, k in zip(streams, keys, strict=True)]
    await asyncio.sleep(0.5)  # each has read where its log ends, and waits for lines
    loop = asyncio.get_running_loop()
    timers = 0
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        nonlocal timers
        timers += 1
        return call_at(when, callback, *args, context=context)

    loop.call_at = counting  # type: ignore[method-assign]
    try:
        await asyncio.sleep(8 * FLUSH_SECONDS)
    finally:
        loop.call_at = call_at  # type: ignore[method-assign]
    # this sleep's own timer and the database client's (its monitors: 9 seen); polling recorders set 400
    assert timers < 25, f"{timers} timers set in {8 * FLUSH_SECONDS:g} s while 50 recorders of quiet tasks waited"
    for stream in streams:
        stream.end()
    ends = await asyncio.gather(*tasks)
    assert all(end == LogEnd(seq=0, total_bytes=0, last_ts_ns=0, truncated=False) for end in ends)


async def test_a_line_is_stored_about_a_flush_period_after_it_came_and_in_order(logs: CountingLogs) -> None:
    stream, key = Stream(), key_of("lines")
    task = asyncio.create_task(recorder(logs, stream, key).run())
    stream.say("first\n", 1)
    began = time.monotonic()
    while await stored_lines(logs, key) != ["first\n"]:
        assert time.monotonic() - began < 5, "the first line was not stored within 5 s"
        await asyncio.sleep(0.05)
    stream.say("second\n", 2)
    stream.say("third\n", 3)
    stream.end()
    end = await task
    assert await stored_lines(logs, key) == ["first\n", "second\n", "third\n"]
    assert end == LogEnd(seq=2, total_bytes=19, last_ts_ns=3, truncated=False)


async def test_the_catch_up_resumes_from_a_clean_end_without_reading_the_store(logs: CountingLogs) -> None:
    stream, key = Stream(), key_of("resume")
    stream.say("during\n", 10)
    stream.end()
    end = await recorder(logs, stream, key).run()
    assert logs.reads == 2  # a recorder of a container it did not see start reads where the stored log ends
    catch_up = Stream()
    catch_up.say("after\n", 20)
    catch_up.end()
    await recorder(logs, catch_up, key, resume=end).run()
    assert logs.reads == 2, "the catch-up read the store again"
    assert catch_up.since == [10], "it asks the engine for what came after the last line kept"
    assert await stored_lines(logs, key) == ["during\n", "after\n"]


async def test_a_recorder_whose_stream_broke_fails_and_the_catch_up_reads_the_store(logs: CountingLogs) -> None:
    stream, key = Stream(), key_of("broken")
    stream.say("kept\n", 5)
    task = asyncio.create_task(recorder(logs, stream, key).run())
    began = time.monotonic()
    while await stored_lines(logs, key) != ["kept\n"]:
        assert time.monotonic() - began < 5, "the line was not stored within 5 s"
        await asyncio.sleep(0.05)
    stream.queue.put_nowait(ConnectionResetError("the engine went away"))
    with pytest.raises(ConnectionResetError):
        await task
    reads = logs.reads
    catch_up = Stream()
    catch_up.say("more\n", 6)
    catch_up.end()
    await recorder(logs, catch_up, key).run()  # no clean end to resume from: the store says where
    assert logs.reads == reads + 2 and catch_up.since == [5]
    assert await stored_lines(logs, key) == ["kept\n", "more\n"]
