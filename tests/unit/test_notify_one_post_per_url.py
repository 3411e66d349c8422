"""One POST per webhook URL and change for each owner, however many of their subscriptions lead there
(shared.notify.decide): the union of the subscriptions' kinds (those that apply to the job) decides whether the
change goes; the subscription to that URL made first decides the body's format and the signing key, the same for
every change and job, so the receiver checks one key. A platform webhook to the same URL is the operator's own
recipient, apart from the user's."""

from __future__ import annotations

import pytest

from shared.jobconfig.notifykinds import Kind
from shared.notify.decide import Change, JobFacts, recipients
from shared.notify.subscriptions import PLATFORM, Channel, Format, Subscription

pytestmark = pytest.mark.unit

A, B = "https://hooks.example/a", "https://hooks.example/b"
SUBS = [
    # made out of order: w1 is the first made to A
    Subscription(id="w2", owner="alice", channel=Channel.WEBHOOK, kinds=frozenset({Kind.RUNNING}), url=A,
                 format=Format.CHAT, created_ms=20),
    Subscription(id="w1", owner="alice", channel=Channel.WEBHOOK, kinds=frozenset({Kind.FAILED}), url=A,
                 created_ms=10),
    Subscription(id="w3", owner="alice", channel=Channel.WEBHOOK, kinds=frozenset(Kind), job="train",
                 url="HTTPS://Hooks.Example:443/a", created_ms=30),  # the same URL, written otherwise
    Subscription(id="w4", owner="alice", channel=Channel.WEBHOOK, kinds=frozenset({Kind.FAILED}), url=B,
                 created_ms=40),
    Subscription(id="ops", owner=PLATFORM, channel=Channel.WEBHOOK, kinds=frozenset({Kind.FAILED}), url=A,
                 created_ms=5),
]


def _job(name: str, switch: frozenset[Kind] | None = None) -> JobFacts:
    return JobFacts(job_id=f"alice~{name}~1a2b3c4d", user="alice", name=name, virtual_cluster="default",
                    state="RUNNING", created_ms=1, switch=switch)


@pytest.mark.parametrize(("kind", "name", "switch", "told"), [
    # w1, w3 (and the platform's) want failures of train: A once, as w1 (made first), B, the platform apart
    (Kind.FAILED, "train", None, [("w1", Format.CLOUDEVENTS), ("w4", Format.CLOUDEVENTS), ("ops", Format.CLOUDEVENTS)]),
    # only w2 and w3 want "running": it goes, as w1 says (its format, its key), once
    (Kind.RUNNING, "train", None, [("w1", Format.CLOUDEVENTS)]),
    (Kind.RUNNING, "other", None, [("w1", Format.CLOUDEVENTS)]),
    # only w3 (train's) wants "stopped"
    (Kind.STOPPED, "train", None, [("w1", Format.CLOUDEVENTS)]),
    (Kind.STOPPED, "other", None, []),
    # the job's switch chooses the kinds of all alice's subscriptions: A and B once each
    (Kind.SUCCEEDED, "other", frozenset({Kind.SUCCEEDED}), [("w1", Format.CLOUDEVENTS), ("w4", Format.CLOUDEVENTS)]),
])
def test_one_post_per_url_and_change(kind: Kind, name: str, switch: frozenset[Kind] | None,
                                     told: list[tuple[str, Format]]) -> None:
    change = Change(job_id=f"alice~{name}~1a2b3c4d", kind=kind, attempt=0, event_id="e1", at_ms=2)
    found = recipients(change, _job(name, switch), SUBS, "")
    assert sorted((r.subscription_id, r.format) for r in found) == sorted(told)
    assert all(r.target == (B if r.subscription_id == "w4" else A) for r in found)


def test_made_at_once_the_smaller_id_is_first() -> None:
    same = [Subscription(id=i, owner="bob", channel=Channel.WEBHOOK, kinds=frozenset({Kind.FAILED}), url=A,
                         created_ms=7, format=f) for i, f in (("b", Format.CLOUDEVENTS), ("a", Format.CHAT))]
    change = Change(job_id="bob~j~1", kind=Kind.FAILED, attempt=0, event_id="e", at_ms=2)
    job = JobFacts(job_id="bob~j~1", user="bob", name="j", virtual_cluster="default", state="FAILED", created_ms=1)
    assert [(r.subscription_id, r.format) for r in recipients(change, job, same, "")] == [("a", Format.CHAT)]
