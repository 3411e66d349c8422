"""The decision as values: a :class:`Plan` when the job fits, :class:`Unplaceable` with counts when not."""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel, ConfigDict


class TaskPlacement(BaseModel):
    """Where one task runs: its node, the GPU indices and the host ports it is given there."""

    model_config = ConfigDict(frozen=True)
    role: str
    index: int
    node_id: str
    ip: str
    gpus: tuple[int, ...] = ()
    ports: dict[str, tuple[int, ...]] = {}


class Plan(BaseModel):
    """Every task of a job, roles in config order then task index."""

    model_config = ConfigDict(frozen=True)
    tasks: tuple[TaskPlacement, ...]

    @cached_property
    def by_task(self) -> dict[tuple[str, int], TaskPlacement]:
        """The tasks keyed by (role, index), built on first use: a plan is frozen, and equality and
        dumps see only ``tasks``. (``model_copy(update=...)`` would carry it over stale; nothing does that.)"""
        return {(t.role, t.index): t for t in self.tasks}

    def for_task(self, role: str, index: int) -> TaskPlacement:
        try:
            return self.by_task[(role, index)]
        except KeyError:
            raise KeyError(f"{role}[{index}]") from None


class Unplaceable(BaseModel):
    """Why a job does not fit now: the first task that fits nowhere and, per reason, how many live nodes
    failed with it (every live node is counted once, under the first check it failed)."""

    model_config = ConfigDict(frozen=True)
    task: str
    counts: dict[str, int]

    @property
    def reason(self) -> str:
        if not self.counts:
            return "no live node is registered"
        parts = [f"{n} node{'s' if n != 1 else ''} {_verb(why, n)}" for why, n in sorted(self.counts.items())]
        return f"task {self.task} fits on no node: " + "; ".join(parts)


def _verb(why: str, count: int) -> str:
    """Reasons are written for many nodes ("lack ..."); one node "lacks"."""
    if count != 1:
        return why
    verb, _, rest = why.partition(" ")
    return f"{ {'lack': 'lacks', 'have': 'has'}.get(verb, verb)} {rest}"
