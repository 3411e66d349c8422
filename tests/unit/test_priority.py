"""Priority classes: OpenPAI's jobPriorityClass, its numbers, the default and the problem text."""

from __future__ import annotations

from typing import Any

import pytest

from shared.admission.validation import Rejected, validate_job_config
from shared.jobconfig.priority import (
    DEFAULT_CLASS,
    FIELD_PATH,
    PRIORITIES,
    PriorityClass,
    check_priority_class,
    class_of_extras,
    is_opportunistic,
    priority_class_of,
    priority_name,
    priority_of,
)
from tests.unit.factories import config_dict, make_config

pytestmark = pytest.mark.unit


def test_the_numbers_are_openpais() -> None:
    # microsoft/pai src/rest-server/src/middlewares/v2/hived.js, convertPriority
    assert {c.value: n for c, n in PRIORITIES.items()} == {"crit": 120, "prod": 100, "test": 10, "oppo": -1}
    assert DEFAULT_CLASS is PriorityClass.TEST
    assert PriorityClass.PROD.number == 100


@pytest.mark.parametrize(("extras", "cls", "number"), [
    ({}, PriorityClass.TEST, 10),
    ({"hivedScheduler": {}}, PriorityClass.TEST, 10),
    ({"hivedScheduler": {"jobPriorityClass": None}}, PriorityClass.TEST, 10),
    ({"hivedScheduler": {"jobPriorityClass": "crit"}}, PriorityClass.CRIT, 120),
    ({"hivedScheduler": {"jobPriorityClass": "prod"}}, PriorityClass.PROD, 100),
    ({"hivedScheduler": {"jobPriorityClass": "test"}}, PriorityClass.TEST, 10),
    ({"hivedScheduler": {"jobPriorityClass": "oppo"}}, PriorityClass.OPPO, -1),
    # Unknown or mistyped: the default here; validation reports it (check_priority_class).
    ({"hivedScheduler": {"jobPriorityClass": "urgent"}}, PriorityClass.TEST, 10),
    ({"hivedScheduler": {"jobPriorityClass": 100}}, PriorityClass.TEST, 10),
    ({"hivedScheduler": "prod"}, PriorityClass.TEST, 10),
])
def test_priority_of_a_config(extras: dict[str, Any], cls: PriorityClass, number: int) -> None:
    # validation refuses the unknown ones (test below); a stored config of any age is read all the same
    config = make_config().model_copy(update={"extras": extras})
    assert class_of_extras(extras) is cls
    assert priority_class_of(config) is cls
    assert priority_of(config) == number


@pytest.mark.parametrize(("priority", "opportunistic"), [(-1, True), (-5, True), (0, False), (10, False),
                                                         (120, False)])
def test_opportunistic_is_below_the_lowest_guaranteed_priority(priority: int, opportunistic: bool) -> None:
    assert is_opportunistic(priority) is opportunistic


@pytest.mark.parametrize(("priority", "name"), [(120, "crit"), (100, "prod"), (10, "test"), (-1, "oppo"), (50, "50")])
def test_priority_names(priority: int, name: str) -> None:
    assert priority_name(priority) == name


@pytest.mark.parametrize(("extras", "problem"), [
    ({}, None),
    ({"hivedScheduler": {"jobPriorityClass": None}}, None),
    ({"hivedScheduler": {"jobPriorityClass": "oppo"}}, None),
    ({"hivedScheduler": {"jobPriorityClass": "urgent"}},
     f'{FIELD_PATH}: must be one of crit, prod, test, oppo; got "urgent"'),
    ({"hivedScheduler": {"jobPriorityClass": 7}}, f"{FIELD_PATH}: must be one of crit, prod, test, oppo; got 7"),
    ({"hivedScheduler": []}, "extras.hivedScheduler: must be an object"),
])
def test_check_priority_class(extras: dict[str, Any], problem: str | None) -> None:
    found = check_priority_class(extras)
    assert (str(found) if found else None) == problem


def test_check_priority_class_with_openpais_user_classes() -> None:
    """OpenPAI's submit schema let users name prod, test and oppo only."""
    users = (PriorityClass.PROD, PriorityClass.TEST, PriorityClass.OPPO)
    found = check_priority_class({"hivedScheduler": {"jobPriorityClass": "crit"}}, users)
    assert str(found) == f'{FIELD_PATH}: must be one of prod, test, oppo; got "crit"'
    assert check_priority_class({"hivedScheduler": {"jobPriorityClass": "prod"}}, users) is None


@pytest.mark.parametrize(("extras", "problem"), [
    ({"hivedScheduler": {"jobPriorityClass": "urgent"}},
     'extras.hivedScheduler.jobPriorityClass: must be one of crit, prod, test, oppo; got "urgent"'),
    ({"hivedScheduler": {"jobPriorityClass": 100}},
     "extras.hivedScheduler.jobPriorityClass: must be one of crit, prod, test, oppo; got 100"),
    ({"hivedScheduler": "prod"}, "extras.hivedScheduler: must be an object"),
])
def test_validation_refuses_an_unknown_class_naming_the_field_and_the_classes(
        extras: dict[str, Any], problem: str) -> None:
    result = validate_job_config(config_dict(extras=extras))
    assert isinstance(result, Rejected) and problem in result.message
