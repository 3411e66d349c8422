"""``jobPriority`` in /api/v2's answers as OpenPAI v1.8 filled it: in the job list, the class the config wrote
(``extras.hivedScheduler.jobPriorityClass``) or null when it wrote none; null in a job's detail and attempts
(v1.8 read it off the framework's snapshot, which has no such field)."""

from __future__ import annotations

from typing import Any

import pytest

from services.submit.contract.v2.jobviews import current_attempt, v2_attempt, v2_detail, v2_summary
from shared.db.lists.paging import PROJECTION, JobSummary
from shared.jobconfig.priority import written_class
from tests.unit.factories import make_config, make_job

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("extras", "shown"), [
    ({"hivedScheduler": {"jobPriorityClass": "prod"}}, "prod"),
    ({"hivedScheduler": {"jobPriorityClass": "oppo"}}, "oppo"),
    ({"hivedScheduler": {"jobPriorityClass": "test"}}, "test"),
    ({"hivedScheduler": {"jobPriorityClass": None}}, None),
    ({"hivedScheduler": {}}, None),
    ({}, None),  # the default class (test) but not written: null, which v1.8's jobPriority=default matched
])
def test_the_list_shows_the_class_the_config_wrote(extras: dict[str, Any], shown: str | None) -> None:
    job = make_job(make_config(extras=extras))
    assert written_class(job.config.extras) == shown
    doc = job.head_document()
    assert "job_priority" in PROJECTION and doc["job_priority"] == shown, "stored where the list's projection reads"
    summary = JobSummary.model_validate({k: v for k, v in doc.items() if k in PROJECTION or k == "_id"})
    assert v2_summary(summary).job_priority == shown


def test_a_jobs_detail_and_attempts_say_null_as_v1_8s_did() -> None:
    job = make_job(make_config(extras={"hivedScheduler": {"jobPriorityClass": "prod"}}))
    assert v2_detail(job, current_attempt(job), (), private=True).job_priority is None
    assert v2_attempt(job, current_attempt(job), private=True).job_priority is None
