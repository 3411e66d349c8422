"""Copies a container's stdout and stderr into the log store while it runs, and once more after.

A recorder resumes where the last stored chunk ends (its byte count and engine timestamp), so a
restarted launcher, or the catch-up pass after an exit, stores every line once. Lines are batched:
a chunk is written ``FLUSH_SECONDS`` after its first line or at ``CHUNK_BYTES``, whichever comes first,
so a follower of the API sees a line within about a second, and a task that prints nothing costs no
wake-up. Past the task's cap, one last line says so and the rest is dropped (an isDebug task is still
read, for the wrapper's announcement).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from services.launcher.engine.driver import ContainerDriver, LogLine
from shared.db.logs import LogChunk, LogEnd, LogLineRecord, LogStore
from shared.taskref import TaskRef

log = structlog.get_logger("paiq.launcher.logs")

FLUSH_SECONDS = 0.25
CHUNK_BYTES = 256 * 1024


def truncation_notice(max_bytes: int) -> str:
    return (f"[paiq] log truncated: this task wrote more than {max_bytes} bytes; later output is not kept "
            "(PAIQ_TASK_LOG_MAX_BYTES)\n")


class LogRecorder:
    def __init__(self, logs: LogStore, driver: ContainerDriver, key: TaskRef, container_id: str, *,
                 max_bytes: int, on_line: Callable[[LogLine], None] | None = None,
                 resume: LogEnd | None = None) -> None:
        self._logs = logs
        self._driver = driver
        self._key = key
        self._container_id = container_id
        self._max_bytes = max_bytes
        self._on_line = on_line
        self._resume = resume  # where the last recorder ended, if it ended cleanly (else read from the store)
        self._pending: list[LogLine] = []
        self._pending_bytes = 0
        self._due = asyncio.Event()  # lines wait to be written
        self._writing = asyncio.Lock()  # one chunk written at a time, in order
        self._seq = 0
        self._total = 0
        self._last_ts = 0
        self._truncated = False

    @property
    def end(self) -> LogEnd:
        return LogEnd(seq=self._seq, total_bytes=self._total, last_ts_ns=self._last_ts, truncated=self._truncated)

    async def run(self) -> LogEnd:
        """Record until the container's output ends; where the stored log then ends."""
        if self._resume is not None:
            r = self._resume
            self._seq, self._total, self._last_ts, self._truncated = r.seq, r.total_bytes, r.last_ts_ns, r.truncated
        else:
            last = await self._logs.last_chunk(self._key)
            if last is not None:
                self._seq, self._total, self._last_ts = last.seq + 1, last.total_bytes, last.last_ts_ns
            run = await self._logs.get_run(self._key)
            self._truncated = bool(run and run.log_truncated)
        if self._truncated and self._on_line is None:
            return self.end
        reader = asyncio.create_task(self._read())
        writer = asyncio.create_task(self._write_when_due())
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)  # the writer ends only failing
        finally:
            reader.cancel()
            async with self._writing:  # a write under way ends first: a cancelled database call can wedge its client
                writer.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
            await self._flush()
        for task in (writer, reader):
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
        return self.end

    async def _write_when_due(self) -> None:
        """A chunk FLUSH_SECONDS after the first line waiting (those that come meanwhile go with it): asleep, not
        polling, while the task prints nothing (a node's long quiet training runs cost nothing here)."""
        while True:
            await self._due.wait()
            await asyncio.sleep(FLUSH_SECONDS)
            self._due.clear()
            await self._flush()

    async def _read(self) -> None:
        async for line in self._driver.follow_logs(self._container_id, self._last_ts):
            if self._on_line is not None:
                self._on_line(line)
            if self._truncated:
                if self._on_line is None:
                    return
                continue
            size = len(line.text.encode())
            if self._total + size > self._max_bytes:
                self._truncated = True
                self._add(LogLine(stream="stderr", ts_ns=line.ts_ns, text=truncation_notice(self._max_bytes)))
                await self._flush()
                await self._logs.set_log_state(self._key, truncated=True)
                log.info("task log truncated at its cap", job_id=self._key.job_id, role=self._key.role,
                         index=self._key.index, cap_bytes=self._max_bytes)
                continue
            self._total += size
            self._add(line)
            if self._pending_bytes >= CHUNK_BYTES:
                await self._flush()

    def _add(self, line: LogLine) -> None:
        self._pending.append(line)
        self._pending_bytes += len(line.text)
        self._due.set()

    async def _flush(self) -> None:
        async with self._writing:
            if not self._pending:
                return
            lines, self._pending, self._pending_bytes = self._pending, [], 0
            self._last_ts = max(self._last_ts, lines[-1].ts_ns)
            chunk = LogChunk(seq=self._seq, total_bytes=self._total, last_ts_ns=self._last_ts,
                             lines=tuple(LogLineRecord(stream=ln.stream, ts_ns=ln.ts_ns, text=ln.text) for ln in lines))
            self._seq += 1
            await self._logs.append(self._key, chunk)
