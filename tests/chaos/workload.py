"""The jobs the chaos test submits, each with the final state (and exit code) it must end in whatever breaks.

Every outcome is decided by the command alone, so it holds however often the platform retries for its
own reasons (a lost node's tasks are retried without using retryCount): the job that fails once reads
its attempt from ``APP_ID`` (``<job id>-<attempt>``) and fails only in attempt 0.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from tests.chaos.observers import Api

IMAGE = "local/busybox:latest"
FINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


@dataclass(frozen=True)
class JobPlan:
    """One job to submit and what must become of it."""

    name: str
    kind: str
    config: dict[str, Any]
    state: str  # SUCCEEDED or FAILED
    exit_code: int | None = None  # the job's appExitCode when it must fail


def _role(name: str, command: str, tasks: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128, "command": command,
            **extra}


def _job(name: str, roles: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"jobName": name, "image": IMAGE, "taskRoles": roles, **extra}


GANG_FAIL = ('if [ "$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX" = 1 ]; then sleep 1; exit 7; fi; sleep 30')
FAILS_IN_ATTEMPT_0 = 'case "$APP_ID" in *-0) exit 4;; esac; sleep 1'


def plan_job(i: int, run_id: str) -> JobPlan:
    """The ``i``-th job of the run: ten kinds in turn, so every stretch of the run has each kind running."""
    name = f"chaos-{run_id}-{i:03d}"
    kinds: list[tuple[str, dict[str, Any], str, int | None]] = [
        ("true", _job(name, [_role("main", "true")]), "SUCCEEDED", None),
        ("sleep-5", _job(name, [_role("main", "sleep 5")]), "SUCCEEDED", None),
        ("exit-3", _job(name, [_role("main", "sleep 1; exit 3")]), "FAILED", 3),
        ("fails-then-succeeds", _job(name, [_role("main", FAILS_IN_ATTEMPT_0)], retryCount=1), "SUCCEEDED", None),
        ("gang-of-3", _job(name, [_role("worker", "sleep 3", tasks=3)]), "SUCCEEDED", None),
        ("always-fails-retried-twice", _job(name, [_role("main", "sleep 1; exit 5")], retryCount=2), "FAILED", 5),
        ("two-roles", _job(name, [_role("ps", "sleep 2", tasks=2), _role("worker", "sleep 4")]), "SUCCEEDED", None),
        ("sleep-1", _job(name, [_role("main", "sleep 1")]), "SUCCEEDED", None),
        ("gang-one-fails", _job(name, [_role("main", GANG_FAIL, tasks=2)]), "FAILED", 7),
        ("sleep-12", _job(name, [_role("main", "sleep 12")]), "SUCCEEDED", None),
    ]
    kind, config, state, code = kinds[i % len(kinds)]
    return JobPlan(name=name, kind=kind, config=config, state=state, exit_code=code)


@dataclass
class Submission:
    """What became of one job's submission: accepted (202, the first time or repeated for its Idempotency-Key)."""

    plan: JobPlan
    tries: list[str] = field(default_factory=list)
    accepted: bool = False
    refused: str = ""
    hidden_by_5xx: bool = False  # a 5xx was answered for a try that had stored the job

    def describe(self) -> str:
        return f"{self.plan.name} ({self.plan.kind}): tries {self.tries}" + (f"; refused: {self.refused}"
                                                                             if self.refused else "")


async def submit(api: Api, user: str, plan: JobPlan, limit_s: float) -> Submission:
    """POST the job with an Idempotency-Key until it is accepted or refused, retrying while no answer (or a
    5xx) comes. A retry with the key gets the first answer again (``Idempotent-Replayed``) when an earlier
    try stored the job: fine after a try that got no answer (its answer was lost), a lie after a 5xx (the
    platform said it stored nothing). A 409 is a refusal: the key makes a retry's conflict impossible."""
    sub = Submission(plan)
    key = f"chaos-{uuid.uuid4().hex}"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        status, body, headers = await api.call_with_headers("POST", f"/api/v1/user/{quote(user)}/jobs", plan.config,
                                                            {"Idempotency-Key": key})
        replayed = headers.get("Idempotent-Replayed") == "true"
        sub.tries.append("no answer" if status is None else f"{status}{' (replayed)' if replayed else ''}")
        if status == 202:
            sub.accepted = True
            sub.hidden_by_5xx = replayed and any(t.startswith("5") for t in sub.tries[:-1])
            return sub
        if status is None or status >= 500:
            await asyncio.sleep(1)
            continue
        sub.refused = f"{status} {str(body)[:300]}"
        return sub
    sub.refused = f"no acceptance within {limit_s}s"
    return sub


async def final_states(api: Api, user: str) -> dict[str, dict[str, Any]] | None:
    """The user's job summaries by name (one page: the run has far fewer than 1,000 jobs); None if no answer."""
    status, body = await api.call("GET", f"/api/v1/jobs?username={quote(user)}&limit=1000")
    if status != 200 or not isinstance(body, list):
        return None
    return {str(j["name"]): j for j in body}


def mismatch(sub: Submission, summary: dict[str, Any] | None) -> str:
    """Why the job's end is not the planned one ('' when it is)."""
    plan = sub.plan
    if summary is None:
        return f"{plan.name} ({plan.kind}): accepted but not listed by the API"
    state, code = summary.get("state"), summary.get("appExitCode")
    if state != plan.state:
        return (f"{plan.name} ({plan.kind}): expected {plan.state}, is {state} (subState {summary.get('subState')!r},"
                f" reason {summary.get('reason')!r}, retries {summary.get('retries')}, appExitCode {code})")
    if plan.exit_code is not None and code != plan.exit_code:
        return f"{plan.name} ({plan.kind}): {state} as planned but appExitCode {code}, expected {plan.exit_code}"
    return ""
