"""A container's counters as the engine's stats API reports them, and the usage between two readings.

Pure: fed with the engine's JSON (``GET /containers/{id}/stats?stream=false&one-shot=true``, cgroup v1 and
v2 alike) and, for GPUs, with what NVML read for the task's devices; tested with recorded answers.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from shared.profiling.usage import Usage


class Counters(BaseModel):
    """One reading: cumulative counters (CPU time, bytes moved) and the memory in use at ``t_ns``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    t_ns: int
    cpu_ns: int
    mem: int
    mem_limit: int
    net_rx: int | None = None  # None: no network of its own (the host's)
    net_tx: int | None = None
    blk_read: int = 0
    blk_write: int = 0


class GpuReading(BaseModel):
    """What NVML read of one device: its utilisation (percent of the last sample period) and memory used."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    index: int
    utilization_percent: float
    memory_used_bytes: int


def engine_time_ns(text: str) -> int:
    """``2026-01-02T03:04:05.123456789Z`` (the engine's RFC 3339, nanoseconds, UTC) -> ns since the epoch."""
    stamp, _, frac = text.rstrip("Z").partition(".")
    seconds = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int((frac + "000000000")[:9])


def counters(stats: object) -> Counters | None:
    """The reading in an engine's stats answer; None when it holds none: a container not running (its
    ``read`` time is year 1), or an answer empty, cut short or malformed (a container being removed is
    answered with an empty body). Never raises: one container's answer costs its own sample at most."""
    if not isinstance(stats, Mapping):
        return None
    try:
        return _reading(stats)
    except (TypeError, ValueError, AttributeError, KeyError):  # pydantic's ValidationError is a ValueError
        return None


def _reading(stats: Mapping[str, Any]) -> Counters | None:
    read = str(stats.get("read") or "")
    cpu = (stats.get("cpu_stats") or {}).get("cpu_usage") or {}
    mem = stats.get("memory_stats") or {}
    if not read or read.startswith("0001-") or "total_usage" not in cpu or "usage" not in mem:
        return None
    networks = stats.get("networks")
    rx = tx = None
    if networks:
        rx = sum(int(n.get("rx_bytes", 0)) for n in networks.values())
        tx = sum(int(n.get("tx_bytes", 0)) for n in networks.values())
    blk_read, blk_write = _blkio((stats.get("blkio_stats") or {}).get("io_service_bytes_recursive") or ())
    return Counters(t_ns=engine_time_ns(read), cpu_ns=int(cpu["total_usage"]), mem=_working_set(mem),
                    mem_limit=int(mem.get("limit", 0)), net_rx=rx, net_tx=tx, blk_read=blk_read, blk_write=blk_write)


def _working_set(mem: Mapping[str, Any]) -> int:
    """Memory in use as ``docker stats`` shows it: usage less the inactive file cache (cgroup v1 names it
    ``total_inactive_file``, v2 ``inactive_file``), which the kernel reclaims before any OOM kill."""
    usage = int(mem.get("usage", 0))
    detail = mem.get("stats") or {}
    cache = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    return usage - int(cache) if int(cache) < usage else usage


def _blkio(entries: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    read = write = 0
    for e in entries or ():
        op = str(e.get("op", "")).lower()
        if op == "read":
            read += int(e.get("value", 0))
        elif op == "write":
            write += int(e.get("value", 0))
    return read, write


def _rate(before: int | None, after: int | None, seconds: float) -> float | None:
    if before is None or after is None or after < before:
        return None
    return (after - before) / seconds


def usage_between(prev: Counters, cur: Counters, gpus: Sequence[GpuReading] = ()) -> Usage | None:
    """The task's usage from ``prev`` to ``cur``; None when there is no span or a counter went back (the
    container was replaced: the next span starts from ``cur``)."""
    span_ns = cur.t_ns - prev.t_ns
    t_ms = cur.t_ns // 1_000_000
    span_ms = t_ms - prev.t_ns // 1_000_000  # so that each point starts where the previous one ended
    if span_ms <= 0 or cur.cpu_ns < prev.cpu_ns:
        return None
    seconds = span_ns / 1e9
    return Usage(
        t_ms=t_ms, span_ms=span_ms, cpu=(cur.cpu_ns - prev.cpu_ns) / span_ns,
        mem=cur.mem, mem_peak=max(cur.mem, prev.mem),
        net_rx=_rate(prev.net_rx, cur.net_rx, seconds), net_tx=_rate(prev.net_tx, cur.net_tx, seconds),
        blk_read=_rate(prev.blk_read, cur.blk_read, seconds), blk_write=_rate(prev.blk_write, cur.blk_write, seconds),
        gpu_util=sum(g.utilization_percent for g in gpus) / len(gpus) if gpus else None,
        gpu_mem=sum(g.memory_used_bytes for g in gpus) if gpus else None)
