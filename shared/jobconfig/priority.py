"""Job priority: OpenPAI's ``extras.hivedScheduler.jobPriorityClass`` and the number each class stands for.

OpenPAI took the class from the job config and gave HiveD a number (microsoft/pai,
src/rest-server/src/middlewares/v2/hived.js, ``convertPriority``, at a95d9420e63e6d6cce2d5cd001b990bb09bf2987;
``crit`` was added by 7a035fa87f09d326ba924c1d5a6965b637191c29, "Add critical priority in hived", #3949)::

    const convertPriority = (priorityClass = 'test') => {
      // allowed range: [-1, 126], default priority 10
      const priorityMap = { crit: 120, prod: 100, test: 10, oppo: -1 };

So a job without the field is ``test`` (10), and ``oppo`` (-1) is HiveD's opportunistic priority
(microsoft/hivedscheduler pkg/api/constants.go at 66f26ac47b2ec74bd14278c767e4f9d779ff1682:
``OpportunisticPriority = -1``; guaranteed priorities run from ``MinGuaranteedPriority = 0`` to
``MaxGuaranteedPriority = 1000``): opportunistic work uses any idle capacity and is preempted first.
paiq keeps OpenPAI's numbers, not HiveD's upper bound: ``crit`` is 120, not 1000.

OpenPAI's submit schema (src/rest-server/src/config/v2/hived.js) let users name only ``prod``, ``test``
and ``oppo``; ``crit`` was mapped but not accepted from a config. paiq knows all four here; whether a
user may ask for ``crit`` is for validation to decide (:func:`check_priority_class` takes the allowed set).

Pure: no I/O. An unknown class is never an exception here: :func:`priority_of` falls back to the
default, and :func:`check_priority_class` words the problem for validation to report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from shared.jobconfig.model import JobConfig
from shared.jobconfig.problems import ConfigProblem


class PriorityClass(StrEnum):
    CRIT = "crit"
    PROD = "prod"
    TEST = "test"
    OPPO = "oppo"

    @property
    def number(self) -> int:
        return PRIORITIES[self]


PRIORITIES: Mapping[PriorityClass, int] = {
    PriorityClass.CRIT: 120,
    PriorityClass.PROD: 100,
    PriorityClass.TEST: 10,
    PriorityClass.OPPO: -1,
}
DEFAULT_CLASS = PriorityClass.TEST  # convertPriority's default argument: the field is absent
OPPORTUNISTIC = PRIORITIES[PriorityClass.OPPO]
MIN_GUARANTEED = 0  # HiveD: a priority below this is opportunistic
FIELD_PATH = "extras.hivedScheduler.jobPriorityClass"
_NAMES = {number: cls.value for cls, number in PRIORITIES.items()}


def _raw_class(extras: Mapping[str, Any]) -> object:
    hived = extras.get("hivedScheduler")
    return hived.get("jobPriorityClass") if isinstance(hived, Mapping) else None


def priority_class_of(config: JobConfig) -> PriorityClass:
    """The config's class; the default when the field is absent, null or not a known class."""
    return class_of_extras(config.extras)


def class_of_extras(extras: Mapping[str, Any]) -> PriorityClass:
    """The class named in a config's ``extras`` (as stored: what the queue's reads project)."""
    raw = _raw_class(extras)
    try:
        return PriorityClass(raw) if isinstance(raw, str) else DEFAULT_CLASS
    except ValueError:
        return DEFAULT_CLASS


def written_class(extras: Mapping[str, Any]) -> str | None:
    """The class as the config wrote it, None when it wrote none: OpenPAI v1.8's ``jobPriority`` of a job
    (its database-controller stored ``_.get(config, 'extras.hivedScheduler.jobPriorityClass', null)``, which
    the job list answered; null is what its ``jobPriority=default`` filter matched)."""
    raw = _raw_class(extras)
    return raw if isinstance(raw, str) else None


def priority_of(config: JobConfig) -> int:
    """The number the scheduler compares: higher runs first and may preempt lower."""
    return PRIORITIES[priority_class_of(config)]


def is_opportunistic(priority: int) -> bool:
    """HiveD's rule: below the lowest guaranteed priority (``oppo``, -1) is opportunistic."""
    return priority < MIN_GUARANTEED


def priority_name(priority: int) -> str:
    """The class a number stands for, as users write it ("prod"), or the number itself when none does."""
    return _NAMES.get(priority, str(priority))


def check_priority_class(extras: Mapping[str, Any],
                         allowed: Iterable[PriorityClass] = tuple(PriorityClass)) -> ConfigProblem | None:
    """Why the config's class is not accepted (an unknown name, not a string, not one of ``allowed``),
    or None when it is absent, null or allowed."""
    hived = extras.get("hivedScheduler")
    if hived is None:
        return None
    if not isinstance(hived, Mapping):
        return ConfigProblem(path="extras.hivedScheduler", rule="must be an object")
    raw = hived.get("jobPriorityClass")
    if raw is None:
        return None
    names = [c.value for c in allowed]
    if not isinstance(raw, str) or raw not in names:
        shown = f'"{raw}"' if isinstance(raw, str) else repr(raw)
        return ConfigProblem(path=FIELD_PATH, rule=f"must be one of {', '.join(names)}; got {shown}")
    return None
