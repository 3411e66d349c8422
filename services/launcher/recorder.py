"""Copies a container's stdout and stderr into the log store while it runs, and once more after.

A recorder resumes where the last stored chunk ends (its byte count and engine timestamp), so a
restarted launcher, or the catch-up pass after an exit, stores every line once. Lines are batched:
a chunk is written every ``FLUSH_SECONDS`` or ``CHUNK_BYTES``, whichever comes first, so a follower of
the API sees a line within about a second. Past the task's cap, one last line says so and the
rest is dropped (an isDebug task is still read, for the wrapper's announcement).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from services.launcher.engine.driver import ContainerDriver, LogLine
from shared.db.logs import LogChunk, LogLineRecord, LogStore
from shared.taskref import TaskRef

log = structlog.get_logger("paiq.launcher.logs")

FLUSH_SECONDS = 0.25
CHUNK_BYTES = 256 * 1024


def truncation_notice(max_bytes: int) -> str:
    return (f"[paiq] log truncated: this task wrote more than {max_bytes} bytes; later output is not kept "
            "(PAIQ_TASK_LOG_MAX_BYTES)\n")


class LogRecorder:
    def __init__(self, logs: LogStore, driver: ContainerDriver, key: TaskRef, container_id: str, *,
                 max_bytes: int, on_line: Callable[[LogLine], None] | None = None) -> None:
        self._logs = logs
        self._driver = driver
        self._key = key
        self._container_id = container_id
        self._max_bytes = max_bytes
        self._on_line = on_line
        self._pending: list[LogLine] = []
        self._pending_bytes = 0
        self._seq = 0
        self._total = 0
        self._last_ts = 0
        self._truncated = False

    async def run(self) -> None:
        last = await self._logs.last_chunk(self._key)
        if last is not None:
            self._seq, self._total, self._last_ts = last.seq + 1, last.total_bytes, last.last_ts_ns
        run = await self._logs.get_run(self._key)
        self._truncated = bool(run and run.log_truncated)
        if self._truncated and self._on_line is None:
            return
        reader = asyncio.create_task(self._read())
        try:
            while not reader.done():
                await asyncio.wait({reader}, timeout=FLUSH_SECONDS)
                await self._flush()
            reader.result()
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
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

    async def _flush(self) -> None:
        if not self._pending:
            return
        lines, self._pending, self._pending_bytes = self._pending, [], 0
        self._last_ts = max(self._last_ts, lines[-1].ts_ns)
        chunk = LogChunk(seq=self._seq, total_bytes=self._total, last_ts_ns=self._last_ts,
                         lines=tuple(LogLineRecord(stream=ln.stream, ts_ns=ln.ts_ns, text=ln.text) for ln in lines))
        self._seq += 1
        await self._logs.append(self._key, chunk)
