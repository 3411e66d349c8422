"""Idle GPUs: a task holding GPUs it does not use, for long enough to tell its owner and the operators."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from shared.profiling.usage import Usage


class GpuIdlePolicy(BaseModel):
    """A task's GPUs are idle while their mean utilisation stays under ``below_percent``; after
    ``after_ms`` of that, the task is flagged (PAIQ_GPU_IDLE_PERCENT, PAIQ_GPU_IDLE_SECONDS)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    below_percent: float = 5.0
    after_ms: int = 30 * 60_000


class IdleState(BaseModel):
    """Where a task stands: idle since when (None: using its GPUs, or not measured yet), the highest
    utilisation seen since, and whether this idle stretch was flagged already."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    since_ms: int | None = None
    peak_percent: float = 0.0
    flagged: bool = False
    below_percent: float = 0.0  # the threshold this stretch is measured against

    def idle_ms(self, now_ms: int) -> int:
        return 0 if self.since_ms is None else max(0, now_ms - self.since_ms)


class GpuIdleFinding(BaseModel):
    """A task just crossed the policy's time under the threshold (one finding per idle stretch)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    since_ms: int
    idle_ms: int
    peak_percent: float
    below_percent: float


def watch(state: IdleState, point: Usage, gpus: int, policy: GpuIdlePolicy) -> tuple[IdleState, GpuIdleFinding | None]:
    """The state after ``point``; a finding when this point makes the stretch long enough, the first time.
    A point without a GPU reading changes nothing; one at or above the threshold ends the stretch."""
    if gpus <= 0 or point.gpu_util is None:
        return state, None
    if point.gpu_util >= policy.below_percent:
        return IdleState(), None
    since = point.start_ms if state.since_ms is None else state.since_ms
    peak = max(state.peak_percent, point.gpu_util) if state.since_ms is not None else point.gpu_util
    idle = point.t_ms - since
    below = policy.below_percent
    if state.flagged or idle < policy.after_ms:
        return IdleState(since_ms=since, peak_percent=peak, flagged=state.flagged, below_percent=below), None
    finding = GpuIdleFinding(since_ms=since, idle_ms=idle, peak_percent=round(peak, 2), below_percent=below)
    return IdleState(since_ms=since, peak_percent=peak, flagged=True, below_percent=below), finding


def idle_sentence(task: str, gpus: int, state: IdleState, until_ms: int) -> str:
    """``task worker[0] held 2 GPUs used under 5% (at most 1.2%) for 42 min``, up to ``until_ms``."""
    plural = "GPU" if gpus == 1 else "GPUs"
    return (f"task {task} held {gpus} {plural} used under {state.below_percent:g}% "
            f"(at most {state.peak_percent:.1f}%) for {_duration(state.idle_ms(until_ms))}")


def _duration(ms: int) -> str:
    minutes = ms // 60_000
    if minutes < 1:
        return f"{ms // 1000} s"
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes / 60:.1f} h"
