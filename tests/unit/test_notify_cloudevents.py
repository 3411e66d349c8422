"""Every CloudEvent a webhook gets is valid CloudEvents 1.0: each kind of notification and the rate limit's
digest (a digest is about many jobs: it has no subject, and says so by leaving the attribute out, since the
spec forbids an empty one), read by the official SDK and checked against the spec's rules."""

from __future__ import annotations

import json

import pytest
from cloudevents.core.exceptions import CloudEventValidationError

from shared.jobconfig.notifykinds import Kind
from shared.notify.decide import Change, JobFacts
from shared.notify.render import NOTIFICATION_TYPE, cloudevent_body, digest, message
from tests.cloudeventspec import checked, parsed, spec_problems

pytestmark = pytest.mark.unit

JOB = JobFacts(job_id="alice~train~1a2b3c4d", user="alice", name="train", virtual_cluster="default",
               state="FAILED", created_ms=1_000_000, launched_ms=1_010_000, completed_ms=1_200_000)


@pytest.mark.parametrize("kind", list(Kind))
def test_each_kinds_cloudevent_is_valid(kind: Kind) -> None:
    change = Change(job_id=JOB.job_id, kind=kind, attempt=1, event_id="e1", at_ms=1_200_000,
                    exit_code=None if kind is Kind.RUNNING else 1)
    body = cloudevent_body("d1", message(change, JOB, "http://portal"), JOB.job_id, change.at_ms)
    event = checked(body)
    assert (event.get_id(), event.get_type(), event.get_subject()) == ("d1", NOTIFICATION_TYPE, JOB.job_id)
    assert event.get_source() == "paiq/notify" and event.get_datacontenttype() == "application/json"
    assert isinstance(event.get_data(), dict) and event.get_data()["kind"] == kind.value  # type: ignore[index]


def test_a_digests_cloudevent_is_valid_and_has_no_subject() -> None:
    """The digest is built as the dispatcher builds it: about no one job."""
    msg = digest([f"[paiq] job j{i} is retried" for i in range(3)], 3, 3600)
    body = cloudevent_body("digest-1", msg, "", 1_203_600_000)
    assert "subject" not in json.loads(body)
    event = checked(body)
    assert event.get_subject() is None and event.get_data() == {**msg.data, "text": msg.text}


@pytest.mark.parametrize(("change", "problem"), [
    ({"subject": ""}, "subject: must be a non-empty string when present"),
    ({"time": ""}, "time: must be a non-empty string when present"),
    ({"id": ""}, "id: must be a non-empty string"),
    ({"time": "yesterday"}, "time: 'yesterday' is not RFC 3339"),
    ({"Ext": "x"}, "Ext: an attribute's name is lower-case letters and digits"),
    ({"ext": None}, "ext: an extension's value must be a string, number or boolean"),
])
def test_the_spec_check_and_the_sdk_refuse_what_the_spec_forbids(change: dict[str, object], problem: str) -> None:
    good = {"specversion": "1.0", "id": "d1", "source": "paiq/notify", "type": NOTIFICATION_TYPE,
            "time": "2024-01-01T00:00:00Z", "datacontenttype": "application/json", "data": {}}
    assert spec_problems(good) == []
    assert spec_problems({**good, **change}) == [problem]
    if problem.startswith(("subject", "id")):  # the SDK's own refusal of an empty attribute
        with pytest.raises(CloudEventValidationError):
            parsed(json.dumps({**good, **change}).encode())
