"""The live feed's job filter: exact job, even when names contain '~' (refused in new job names since
paiq follows OpenPAI's jobName pattern, but jobs submitted before keep theirs)."""

from __future__ import annotations

import pytest

from services.submit.routes.feed import _wanted
from shared.db.journal import JournalEntry
from shared.events import JobSubmitted, JobSubmittedData, dump_event

pytestmark = pytest.mark.unit


def event(job_id: str) -> JournalEntry:
    e = JobSubmitted(subject=job_id, data=JobSubmittedData(job_id=job_id, user="u", virtual_cluster="default"))
    return JournalEntry(seq=1, id=e.id, job=job_id, type=e.type, at_ms=1, body=dump_event(e).decode())


@pytest.mark.parametrize(("subject", "user", "job", "wanted"), [
    ("alice~a~0f0f0f0f", "alice", "a", True),
    ("alice~a~b~0f0f0f0f", "alice", "a", False),
    ("alice~a~b~0f0f0f0f", "alice", "a~b", True),
    ("alice~a~0f0f0f0f", "alice", None, True),
    ("alicia~a~0f0f0f0f", "alice", None, False),
    ("bob~a~0f0f0f0f", None, None, True),
])
def test_job_filter(subject: str, user: str | None, job: str | None, wanted: bool) -> None:
    assert _wanted(event(subject), user, job) is wanted
