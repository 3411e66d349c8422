"""Notifications' bodies and answers (paiq's own routes, services/submit/routes/notify.py): subscriptions, the
e-mail address they mail, and a user's recent deliveries. The OpenAPI document's schemas are generated from
:data:`NOTIFY_ANSWERS` and :data:`NOTIFY_REQUESTS`."""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo

from services.submit.contract.answers import Answer
from services.submit.contract.refusals import refusal
from services.submit.contract.requests import Request
from shared.jobconfig.model import JOB_NAME_PATTERN
from shared.jobconfig.notifykinds import KIND_NAMES, Kind
from shared.notify.subscriptions import MAX_URL_LENGTH

EMAIL_MAX = 254


def _kinds(value: object) -> object:
    if not isinstance(value, list) or not value:
        raise refusal(f"kinds: must be a non-empty list of {KIND_NAMES}")
    for kind in value:
        if kind not in Kind.__members__.values():
            raise refusal(f"kinds: {kind!r} is not one of {KIND_NAMES}")
    return value


def _url(value: object) -> object:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_URL_LENGTH:
        raise refusal(f"url: must be an http or https URL of at most {MAX_URL_LENGTH} characters")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise refusal("url: must be an http or https URL with a host")
    return value


def _job(value: object) -> object:
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > 255 or not re.fullmatch(JOB_NAME_PATTERN, value):
        raise refusal(f"job: must be one of your job names ({JOB_NAME_PATTERN}), or absent for all your jobs")
    return value


def _flag(value: object, info: ValidationInfo) -> object:
    if value is not None and not isinstance(value, bool):
        raise refusal(f"{info.field_name}: must be true or false")
    return bool(value)


def _email(value: object) -> object:
    if not isinstance(value, str) or len(value) > EMAIL_MAX:
        raise refusal(f"email: must be a string of at most {EMAIL_MAX} characters ('' removes it)")
    if value and (value.count("@") != 1 or value.startswith("@") or value.endswith("@") or any(
            c.isspace() or c in "<>,;\"" for c in value)):
        raise refusal("email: must be an address like alice@example.com ('' removes it)")
    return value


class NewSubscription(Request):
    """``POST /api/v1/notifications/subscriptions``: an e-mail subscription (to the address on your user record)
    or a webhook; ``job``: one job name of yours (absent: all your jobs); ``platform``: an administrator's
    webhook told of every user's jobs."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    channel: Literal["email", "webhook"]
    kinds: Annotated[list[Kind], BeforeValidator(_kinds)] = Field(min_length=1, max_length=len(Kind))
    url: Annotated[str | None, BeforeValidator(_url)] = Field(None, max_length=MAX_URL_LENGTH)
    format: Literal["cloudevents", "chat"] = "cloudevents"
    job: Annotated[str, BeforeValidator(_job)] = Field("", max_length=255)
    platform: Annotated[bool, BeforeValidator(_flag)] = False


class EmailAddress(Request):
    """``PUT /api/v1/notifications/email``: the address e-mail notifications go to (your user record's
    ``email``; '' removes it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    email: Annotated[str, BeforeValidator(_email)] = Field(max_length=EMAIL_MAX)


class SubscriptionView(Answer):
    id: str
    channel: Literal["email", "webhook"]
    kinds: tuple[Kind, ...]
    url: str | None = Field(description="a webhook's URL (null for e-mail)")
    format: Literal["cloudevents", "chat"]
    job: str | None = Field(description="the one job name it is about; null: all the owner's jobs")
    platform: bool
    created_time: int


class Subscriptions(Answer):
    email: str | None = Field(description="where e-mail goes: the user record's address (null: none)")
    subscriptions: tuple[SubscriptionView, ...]


class NewSubscriptionAnswer(Answer):
    subscription: SubscriptionView
    secret: str | None = Field(description="a webhook's signing key (X-Paiq-Signature: sha256=HMAC of the body): "
                                           "shown this once, never again")


class DeliveryView(Answer):
    id: str = Field(description="the delivery's id: X-Paiq-Delivery, the CloudEvent's id, the email's Message-ID")
    job_id: str | None
    job_name: str | None
    kind: str = Field(description="running, succeeded, failed, stopped, retried, or digest")
    channel: Literal["email", "webhook"]
    target: str = Field(description="the address, or the webhook's origin")
    state: Literal["pending", "sent", "failed", "held", "digested"]
    tries: int
    last_error: str | None
    created_time: int
    sent_time: int | None
    next_try_time: int | None


class Deliveries(Answer):
    deliveries: tuple[DeliveryView, ...]


NOTIFY_ANSWERS: tuple[type[BaseModel], ...] = (Subscriptions, NewSubscriptionAnswer, Deliveries)
NOTIFY_REQUESTS: tuple[type[BaseModel], ...] = (NewSubscription, EmailAddress)
