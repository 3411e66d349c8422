"""The name of one task: which job, which attempt, which role, which index of it.

Every value that speaks of one task is a :class:`TaskRef` (its launch spec, its run and profile documents,
the events about it) or gives one (its container's labels): the four fields are spelled once, here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TaskRef(BaseModel):
    """One task of one attempt of one job (job ids are unique per submission). Values that carry more
    about the task inherit it, so their fields, JSON and documents keep these four names."""

    model_config = ConfigDict(frozen=True)
    job_id: str
    attempt: int
    role: str
    index: int

    @property
    def id(self) -> str:
        """The task's document id (``task_runs``, ``task_profiles``): ``<job>/<attempt>/<role>/<index>``."""
        return f"{self.job_id}/{self.attempt}/{self.role}/{self.index}"

    @property
    def ref(self) -> TaskRef:
        """Just the task's name (of a value that carries more): equal to, and hashed as, any other of it."""
        return TaskRef(job_id=self.job_id, attempt=self.attempt, role=self.role, index=self.index)

    def fields(self) -> dict[str, str | int]:
        """The four fields, to build a value that carries them (an event's data, a document)."""
        return {"job_id": self.job_id, "attempt": self.attempt, "role": self.role, "index": self.index}
