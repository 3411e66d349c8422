"""The launcher's sampler: every PAIQ_PROFILE_SECONDS, each running task's usage, stored and watched.

A round lists the node's running task containers (one engine call), reads every one's counters side by
side (the engine answers each on its collector's next tick, about a second) and, when some task holds
GPUs, every device once through NVML; :func:`services.launcher.profiling.samplestep.advance` decides each task's new
profile, the round stores them in one request, publishes ``task.gpu_idle`` for tasks that just crossed the
idle threshold and sets the node's gauges. What the process remembers (the previous reading of each
container) is only what a difference needs: a restarted launcher loads the profiles back and goes on.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog

from services.launcher.deps import LauncherDeps
from services.launcher.engine.enginestats import Counters, GpuReading
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.profiling.gpureader import GpuReader
from services.launcher.profiling.samplestep import advance, new_profile
from shared.db.profiles import ProfileStore, ProfileWrite, TaskProfile
from shared.events import CloudEvent, TaskGpuIdle, TaskGpuIdleData
from shared.ops.metrics import (
    GPU_IDLE_TASKS,
    GPU_IDLE_TOTAL,
    NODE_CPU_USED,
    NODE_GPU_MEMORY,
    NODE_GPU_UTILIZATION,
    NODE_MEMORY_USED,
    NODE_TASKS_SAMPLED,
    SAMPLES_SKIPPED,
    SAMPLING_ROUND,
    TASK_GPU_UTILIZATION,
    VC_GPU_SECONDS_HELD,
    VC_GPU_SECONDS_USED,
)
from shared.profiling.idle import GpuIdleFinding, GpuIdlePolicy

log = structlog.get_logger("paiq.launcher.sampling")


@dataclass
class _Tracked:
    task: TaskLabels
    profile: TaskProfile | None  # None until the first reading (or the stored one, after a restart)
    stored: bool
    prev: Counters | None = None


class Sampler:
    def __init__(self, deps: LauncherDeps, gpus: GpuReader | None, profiles: ProfileStore) -> None:
        self._deps = deps
        self._gpus = gpus
        self._profiles = profiles
        self._tracked: dict[str, _Tracked] = {}
        options = deps.options
        self._policy = GpuIdlePolicy(below_percent=options.gpu_idle_percent, after_ms=options.gpu_idle_seconds * 1000)
        self._interval_ms = options.profile_seconds * 1000

    @property
    def tracked(self) -> int:
        return len(self._tracked)

    async def round(self) -> None:
        started = time.perf_counter()
        node_id = self._deps.node.node_id
        running = await self._deps.driver.list_running(node_id)
        live = {c.id: task for c in running if (task := TaskLabels.from_labels(c.labels)) and task.node == node_id}
        for gone in self._tracked.keys() - live.keys():
            del self._tracked[gone]
        await self._track([(cid, task) for cid, task in live.items() if cid not in self._tracked])
        ids = list(live)
        readings = await asyncio.gather(*(self._reading(cid) for cid in ids))
        if skipped := sum(1 for r in readings if r is None):
            SAMPLES_SKIPPED.labels(node_id).inc(skipped)
        gpu_readings = self._read_gpus() if any(t.task.gpus for t in self._tracked.values()) else {}
        writes: dict[str, ProfileWrite] = {}
        events: list[CloudEvent] = []
        for cid, cur in zip(ids, readings, strict=True):
            tracked = self._tracked.get(cid)
            if cur is None or tracked is None:
                continue
            write, finding = self._advance(tracked, cur, gpu_readings)
            if write is not None:
                writes[cid] = write
            if finding is not None:
                events.append(self._idle_event(tracked, finding))
        if await self._profiles.save(list(writes.values())):
            # An insert found the document there (another launcher process of this node made it): those
            # tasks are tracked afresh next round, from what is stored.
            for cid in [cid for cid, w in writes.items() if w.new]:
                self._tracked.pop(cid, None)
        if events and await self._deps.publish(events):  # then journaled as published, for consumers that resume
            await self._deps.store.journal.record(events, version=0, session=None, published=[True] * len(events))
            self._deps.store.journal.touched()
        self._gauges(gpu_readings)
        SAMPLING_ROUND.observe(time.perf_counter() - started)

    async def _reading(self, container_id: str) -> Counters | None:
        """The container's counters, or None: it ended or went since the listing, or the engine's answer
        was refused, empty or unreadable (a container being removed). Any failure here costs this one
        sample, never the round: the other tasks are sampled and the loop stays healthy."""
        try:
            return await self._deps.driver.counters(container_id)
        except Exception as e:
            log.debug("no sample of a task this round: its stats could not be read", container=container_id[:12],
                      error=repr(e))
            return None

    async def _track(self, new: list[tuple[str, TaskLabels]]) -> None:
        stored = await asyncio.gather(*(self._profiles.get(task.ref) for _, task in new))
        for (cid, task), profile in zip(new, stored, strict=True):
            self._tracked[cid] = _Tracked(task=task, profile=profile, stored=profile is not None)

    def _read_gpus(self) -> dict[int, GpuReading]:
        if self._gpus is None:
            return {}
        try:
            return self._gpus.read()
        except Exception as e:  # a driver hiccup: this round has no GPU readings, never no sample
            log.warning("could not read the node's GPUs this round", error=repr(e))
            return {}

    def _advance(self, tracked: _Tracked, cur: Counters,
                 gpus: dict[int, GpuReading]) -> tuple[ProfileWrite | None, GpuIdleFinding | None]:
        profile = tracked.profile or new_profile(tracked.task, self._deps.node.node_id, self._interval_ms, cur)
        step = advance(profile, tracked.stored, tracked.prev, cur, gpus, self._policy)
        tracked.prev = cur
        tracked.profile = step.profile
        if step.write is None:
            return None, None
        tracked.stored = True
        point = step.profile.last
        if point is not None and profile.gpus:
            held = len(profile.gpus) * point.span_ms / 1000
            VC_GPU_SECONDS_HELD.labels(profile.vc).inc(held)
            if point.gpu_util is not None:
                VC_GPU_SECONDS_USED.labels(profile.vc).inc(held * point.gpu_util / 100)
                TASK_GPU_UTILIZATION.labels(profile.vc).observe(point.gpu_util)
        if step.finding is not None:
            GPU_IDLE_TOTAL.labels(profile.vc).inc()
            log.warning("a task holds GPUs it does not use", job_id=profile.job_id, role=profile.role,
                        index=profile.index, gpus=list(profile.gpus), idle_seconds=step.finding.idle_ms // 1000,
                        peak_percent=step.finding.peak_percent, below_percent=step.finding.below_percent)
        return step.write, step.finding

    def _idle_event(self, tracked: _Tracked, finding: GpuIdleFinding) -> TaskGpuIdle:
        t, node_id = tracked.task, self._deps.node.node_id
        return TaskGpuIdle(subject=t.job, data=TaskGpuIdleData(
            **t.ref.fields(), node_id=node_id, user=t.user,
            virtual_cluster=t.vc, gpus=t.gpus, idle_since_ms=finding.since_ms, idle_seconds=finding.idle_ms // 1000,
            peak_percent=finding.peak_percent, below_percent=finding.below_percent))

    def _gauges(self, gpus: dict[int, GpuReading]) -> None:
        node = self._deps.node.node_id
        lasts = [t.profile.last for t in self._tracked.values() if t.profile is not None and t.profile.last]
        NODE_TASKS_SAMPLED.labels(node).set(len(lasts))
        NODE_CPU_USED.labels(node).set(sum(p.cpu for p in lasts))
        NODE_MEMORY_USED.labels(node).set(sum(p.mem for p in lasts))
        GPU_IDLE_TASKS.labels(node).set(sum(1 for t in self._tracked.values()
                                            if t.profile is not None and t.profile.idle.flagged))
        for index, reading in gpus.items():
            NODE_GPU_UTILIZATION.labels(node, str(index)).set(reading.utilization_percent)
            NODE_GPU_MEMORY.labels(node, str(index)).set(reading.memory_used_bytes)

