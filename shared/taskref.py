"""The name of one task: which job, which attempt, which role, which index of it, which run of it.

Every value that speaks of one task is a :class:`TaskRef` (its launch spec, its run and profile documents,
the events about it) or gives one (its container's labels): the fields are spelled once, here.

``task_attempt`` numbers the runs of one task within one attempt of its job: 0, then one more each time
the task is re-run in place (protocol v2's ``taskRetryCount``: :mod:`shared.lifecycle.taskretry`). It is
frameworkcontroller's task attempt id (``FC_TASK_ATTEMPT_ID``), and what keeps a late report of an
earlier run from being taken for the current one.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TaskRef(BaseModel):
    """One run of one task of one attempt of one job (job ids are unique per submission). Values that carry
    more about the task inherit it, so their fields, JSON and documents keep these names."""

    model_config = ConfigDict(frozen=True)
    job_id: str
    attempt: int
    role: str
    index: int
    task_attempt: int = 0  # absent (0) in what older services wrote: a task ran once per job attempt then

    @property
    def id(self) -> str:
        """The task's document id (``task_runs``, ``task_profiles``): ``<job>/<attempt>/<role>/<index>``, and
        ``/<task_attempt>`` after it for a task's re-runs (a first run's id is what it always was)."""
        base = f"{self.job_id}/{self.attempt}/{self.role}/{self.index}"
        return f"{base}/{self.task_attempt}" if self.task_attempt else base

    @property
    def ref(self) -> TaskRef:
        """Just the task's name (of a value that carries more): equal to, and hashed as, any other of it."""
        return TaskRef(job_id=self.job_id, attempt=self.attempt, role=self.role, index=self.index,
                       task_attempt=self.task_attempt)

    def fields(self) -> dict[str, str | int]:
        """The fields, to build a value that carries them (an event's data, a document)."""
        return {"job_id": self.job_id, "attempt": self.attempt, "role": self.role, "index": self.index,
                "task_attempt": self.task_attempt}
