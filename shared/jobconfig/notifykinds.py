"""What a job's owner may be told about: OpenPAI's ``extras.jobStatusChangeNotification``.

OpenPAI v1.x documented it in how-to-use-advanced-job-settings.md (microsoft/pai master, "Job Status
Change Notification")::

    extras:
      jobStatusChangeNotification:
        running: true
        succeeded: true
        stopped: false
        failed: true
        retried: false

and read it with lodash (src/database-controller/src/common/framework.js, ``getRequestUpdate``:
``_.get(jobStatusChangeNotification, 'failed', false)`` and so on), a missing key being false; its
rest-server's schema took ``extras`` as any object, so nothing checked the switch. paiq checks it like
every field: an object whose keys are those five and whose values are booleans (null: false, as a
missing key); anything else is refused naming the key and the rule. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from shared.jobconfig.problems import ConfigProblem

SWITCH = "jobStatusChangeNotification"
FIELD_PATH = f"extras.{SWITCH}"


class Kind(StrEnum):
    """A change of a job's state that its owner may be told about (OpenPAI's five)."""

    RUNNING = "running"  # the job's first task started (once per job, as OpenPAI's notifiedAtRunning)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    RETRIED = "retried"  # an attempt ended and the job is retried (once per attempt)


KIND_NAMES = ", ".join(k.value for k in Kind)


def check_switch(extras: Mapping[str, Any]) -> list[ConfigProblem]:
    """Why the job's ``jobStatusChangeNotification`` is refused (none: absent, null, or well formed)."""
    switch = extras.get(SWITCH)
    if switch is None:
        return []
    if not isinstance(switch, Mapping):
        return [ConfigProblem(path=FIELD_PATH, rule=f"must be an object of booleans by state ({KIND_NAMES})")]
    problems = []
    for key, value in switch.items():
        if key not in Kind.__members__.values():
            problems.append(ConfigProblem(path=f"{FIELD_PATH}.{key}", rule=f"is not a state; one of {KIND_NAMES}"))
        elif value is not None and not isinstance(value, bool):
            problems.append(ConfigProblem(path=f"{FIELD_PATH}.{key}", rule="must be true or false"))
    return problems


def switch_kinds(extras: Mapping[str, Any]) -> frozenset[Kind] | None:
    """The kinds a (valid) job's switch turns on; None when the job has no switch."""
    switch = extras.get(SWITCH)
    if not isinstance(switch, Mapping):
        return None
    return frozenset(Kind(k) for k, v in switch.items() if v is True and k in Kind.__members__.values())


def parse_kinds(text: str) -> frozenset[Kind]:
    """``running,failed`` (or ``all``) as kinds; ValueError naming the unknown one."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if words == ["all"]:
        return frozenset(Kind)
    unknown = [w for w in words if w not in Kind.__members__.values()]
    if unknown:
        raise ValueError(f"unknown kind {unknown[0]!r} (one of {KIND_NAMES}, or all)")
    return frozenset(Kind(w) for w in words)
