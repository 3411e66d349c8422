"""Who is told what: from a change of a job (an event, with the job as stored) and the subscriptions, the
recipients of one message each. Pure.

Rules (docs "Notifications"):

- A change is one of OpenPAI's five kinds (:class:`~shared.jobconfig.notifykinds.Kind`), identified by a key that is
  the same however often its event arrives: ``<job>/running`` (once per job: the first task that starts, as
  OpenPAI's ``notifiedAtRunning``), ``<job>/<attempt>/retried`` (once per attempt), ``<job>/<final state>``.
- A user's subscription is told of the kinds the job's ``extras.jobStatusChangeNotification`` turns on when
  the job has one, else of its own ``kinds``; a job with the switch also mails its owner's address (on the
  user record) without a subscription, as OpenPAI did. An operator's platform-wide webhook keeps its own
  kinds for every job.
- One message per recipient (an address, a webhook) and change, however many subscriptions lead there. A
  webhook is its owner's URL (:func:`~shared.notify.endpoints.same_url`): one user's several subscriptions to
  one URL get one POST per change. It goes if any of them that applies to the job wants the change (the union
  of their kinds); the one made first (``created_ms``, then the smaller id) decides the body's format and the
  signing key, for every change and job alike, so the receiver checks one key. Another owner's subscription to
  the same URL (an operator's platform-wide webhook) is a recipient of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from shared.jobconfig.notifykinds import Kind
from shared.notify.endpoints import same_url
from shared.notify.subscriptions import Channel, Format, Subscription
from shared.records import JobState

FINAL_KINDS = {JobState.SUCCEEDED: Kind.SUCCEEDED, JobState.FAILED: Kind.FAILED, JobState.STOPPED: Kind.STOPPED}


class Change(BaseModel):
    """What happened to a job, as an event said it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    job_id: str
    kind: Kind
    attempt: int
    event_id: str
    at_ms: int  # the event's time
    exit_code: int | None = None
    reason: str = ""

    @property
    def key(self) -> str:
        if self.kind is Kind.RUNNING:
            return f"{self.job_id}/running"
        if self.kind is Kind.RETRIED:
            return f"{self.job_id}/{self.attempt}/retried"
        return f"{self.job_id}/{self.kind.value}"


class JobFacts(BaseModel):
    """What a message says about the job, read from its record when the change is handled."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    job_id: str
    user: str
    name: str
    virtual_cluster: str
    state: str
    created_ms: int
    launched_ms: int | None = None
    completed_ms: int | None = None
    retries: int = 0
    switch: frozenset[Kind] | None = None  # extras.jobStatusChangeNotification; None: the job has none


class Recipient(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    channel: Channel
    target: str  # an email address, or a webhook's URL
    owner: str  # whose deliveries list shows it: the job's user, or PLATFORM for an operator's webhook
    subscription_id: str = ""  # a webhook's (its signing key); "" for email
    format: Format = Format.CLOUDEVENTS

    @property
    def key(self) -> str:
        """One message per change to each: an address, a webhook."""
        return f"email:{self.target.lower()}" if self.channel is Channel.EMAIL else f"webhook:{self.subscription_id}"


def delivery_id(change_key: str, recipient_key: str) -> str:
    """The delivery's id and idempotency key: the same for the same change and recipient, in any process."""
    return hashlib.sha256(f"{change_key}\n{recipient_key}".encode()).hexdigest()[:32]


def recipients(change: Change, job: JobFacts, subscriptions: Sequence[Subscription], email: str) -> list[Recipient]:
    """Everyone ``change`` goes to, once each. ``subscriptions``: the job's user's and the platform's;
    ``email``: the address on the user's record ("" when none)."""
    found: dict[str, Recipient] = {}
    if job.switch is not None and change.kind in job.switch and email:
        _add(found, Recipient(channel=Channel.EMAIL, target=email, owner=job.user))
    first = first_made(subscriptions)
    for sub in subscriptions:
        if not sub.applies_to(job.user, job.name):
            continue
        kinds = sub.kinds if sub.platform or job.switch is None else job.switch
        if change.kind not in kinds:
            continue
        if sub.channel is Channel.EMAIL:
            if email:
                _add(found, Recipient(channel=Channel.EMAIL, target=email, owner=job.user))
        else:
            lead = first[_webhook(sub)]
            _add(found, Recipient(channel=Channel.WEBHOOK, target=lead.url, owner=lead.owner,
                                  subscription_id=lead.id, format=lead.format))
    return list(found.values())


def _webhook(sub: Subscription) -> tuple[str, str]:
    return sub.owner, same_url(sub.url)


def first_made(subscriptions: Iterable[Subscription]) -> dict[tuple[str, str], Subscription]:
    """Each owner's webhook (owner, URL): the subscription to it made first, which speaks for them all."""
    first: dict[tuple[str, str], Subscription] = {}
    for sub in subscriptions:
        if sub.channel is Channel.WEBHOOK:
            known = first.get(_webhook(sub))
            if known is None or (sub.created_ms, sub.id) < (known.created_ms, known.id):
                first[_webhook(sub)] = sub
    return first


def _add(found: dict[str, Recipient], recipient: Recipient) -> None:
    found.setdefault(recipient.key, recipient)
