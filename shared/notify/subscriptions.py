"""Who asked to be told: a user's subscriptions (email to the address on their user record, or webhooks) and
the operators' platform-wide webhooks. Pure values; stored by :mod:`shared.db.notifications`.

A subscription applies to all its owner's jobs, or to one job name of theirs (every submission under that
name). Its ``kinds`` are what it is told of, unless the job has ``extras.jobStatusChangeNotification``:
then the job's switch chooses the kinds for that job (:mod:`shared.notify.decide`). A webhook's signing
key is kept sealed (:mod:`shared.notify.signing`) and never shown after its creation.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from shared.jobconfig.notifykinds import Kind

PLATFORM = ""  # the owner of an operator's platform-wide webhook: every user's jobs
MAX_SUBSCRIPTIONS = 20  # per user (and for the platform): each is read at every change of their jobs
MAX_URL_LENGTH = 2048


class Channel(StrEnum):
    EMAIL = "email"
    WEBHOOK = "webhook"


class Format(StrEnum):
    """A webhook's body: the notification as a CloudEvent (JSON), or ``{"text": ...}`` as Slack- and
    Teams-style incoming webhooks take it."""

    CLOUDEVENTS = "cloudevents"
    CHAT = "chat"


class Subscription(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    owner: str  # a user name, or PLATFORM
    channel: Channel
    kinds: frozenset[Kind]
    url: Annotated[str, Field(max_length=MAX_URL_LENGTH)] = ""  # a webhook's
    format: Format = Format.CLOUDEVENTS
    job: str = ""  # one job name of the owner's; "": all their jobs
    sealed_secret: str = Field("", repr=False)  # a webhook's signing key, sealed
    created_ms: int = 0

    @property
    def platform(self) -> bool:
        return self.owner == PLATFORM

    def applies_to(self, user: str, job_name: str) -> bool:
        """Whether a job of ``user`` named ``job_name`` is one this subscription is about."""
        if not self.platform and self.owner != user:
            return False
        return not self.job or self.job == job_name
