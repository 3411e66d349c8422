"""The message: a short sentence a user understands, the same for every channel, in three bodies (an email,
a CloudEvent for a webhook, ``{"text": ...}`` for a chat webhook). Rendered once, when the change is handled,
and stored with the delivery, so a message sent again after a crash is byte for byte the first. Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict

from shared.jobconfig.notifykinds import Kind
from shared.notify.decide import Change, JobFacts

NOTIFICATION_TYPE = "paiq.notification"  # the CloudEvent type of a webhook's body
DIGEST_LINES = 20  # a digest lists this many changes; it counts them all


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    subject: str
    text: str
    data: dict[str, Any]  # the CloudEvent's data


_VERBS = {Kind.RUNNING: "is running", Kind.SUCCEEDED: "succeeded", Kind.FAILED: "failed",
          Kind.STOPPED: "was stopped", Kind.RETRIED: "is retried"}


def job_link(portal_url: str, user: str, name: str) -> str:
    return f"{portal_url.rstrip('/')}/#/job/{quote(user, safe='')}/{quote(name, safe='')}"


def duration(seconds: float) -> str:
    """``3h02m``, ``4m05s``, ``12s``."""
    s = max(0, int(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def message(change: Change, job: JobFacts, portal_url: str) -> Message:
    link = job_link(portal_url, job.user, job.name)
    verb = _VERBS[change.kind]
    exit_part = "" if change.exit_code is None else f" with exit code {change.exit_code}"
    subject = f"[paiq] job {job.name} {verb}{exit_part}"
    lines = [f"Job {job.name} of {job.user} {verb}{exit_part}."]
    if change.reason:
        lines.append(f"Reason: {change.reason}")
    ran_s: float | None = None
    if job.launched_ms is not None and change.kind is not Kind.RUNNING:
        ran_s = (change.at_ms - job.launched_ms) / 1000
        lines.append(f"Ran for {duration(ran_s)} (attempt {change.attempt}).")
    elif change.kind is Kind.RUNNING:
        lines.append(f"Waited {duration((change.at_ms - job.created_ms) / 1000)} since it was submitted "
                     f"(attempt {change.attempt}).")
    lines.append(f"Virtual cluster: {job.virtual_cluster}. At {_when(change.at_ms)}.")
    lines.append(link)
    data = {"jobId": job.job_id, "user": job.user, "jobName": job.name, "kind": change.kind.value,
            "attempt": change.attempt, "exitCode": change.exit_code, "reason": change.reason,
            "virtualCluster": job.virtual_cluster, "durationSeconds": None if ran_s is None else round(ran_s, 1),
            "atMs": change.at_ms, "link": link, "eventId": change.event_id}
    return Message(subject=subject, text="\n".join(lines), data=data)


def digest(subjects: Sequence[str], total: int, window_s: int) -> Message:
    """What a recipient whose rate limit tripped gets at the end of the window instead of each message."""
    shown = list(subjects[:DIGEST_LINES])
    more = total - len(shown)
    lines = [f"{total} job changes in the last {duration(window_s)} were held back by the rate limit:"]
    lines += [f"- {s.removeprefix('[paiq] ')}" for s in shown]
    if more > 0:
        lines.append(f"... and {more} more (paiq notify deliveries lists them)")
    return Message(subject=f"[paiq] {total} job changes (digest)", text="\n".join(lines),
                   data={"kind": "digest", "count": total, "changes": shown})


def cloudevent_body(delivery_id: str, msg: Message, job_id: str, at_ms: int) -> bytes:
    """The webhook's CloudEvent (1.0, structured JSON): its ``id`` is the delivery's (the idempotency key: the
    same on every try), its ``subject`` the job's id. A digest is about no one job (``job_id`` ""): it has no
    ``subject`` at all, since the spec forbids an empty optional attribute (the official SDK refuses the
    event: "Attribute 'subject' must not be empty")."""
    event: dict[str, Any] = {"specversion": "1.0", "id": delivery_id, "source": "paiq/notify",
                             "type": NOTIFICATION_TYPE}
    if job_id:
        event["subject"] = job_id
    event.update(time=_when(at_ms), datacontenttype="application/json", data={**msg.data, "text": msg.text})
    return json.dumps(event, separators=(",", ":")).encode()


def chat_body(msg: Message) -> bytes:
    return json.dumps({"text": msg.text}).encode()


def _when(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
