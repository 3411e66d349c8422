"""A submission made once, whatever a client's retries: the ``Idempotency-Key`` request header.

A client that did not get its answer (a timeout, a dropped connection, a 503 while the database
restarted) sends the same POST again with the same key; the first submission's answer comes back
instead of a second job or a ``409``. The record is stored in the same step as the job (see
``Store.submit_job``) and kept a day, as payment APIs keep theirs. A key sent again with another body
is refused: it names another request.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"  # on an answer that repeats an earlier request's
MAX_KEY_CHARS = 255
KEEP_SECONDS = 24 * 3600


class Submitted(Enum):
    STORED = "stored"  # this request stored the job (maybe on a second try)
    DUPLICATE = "duplicate"  # an earlier request with the same key stored it


def key_problem(value: str) -> str | None:
    """Why the header's value is not a key (None: it is one): 1-255 visible ASCII characters."""
    if not 1 <= len(value) <= MAX_KEY_CHARS:
        return f"{HEADER}: must be 1-{MAX_KEY_CHARS} characters, got {len(value)}"
    if not all("!" <= c <= "~" for c in value):
        return f"{HEADER}: must be visible ASCII characters (no spaces)"
    return None


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class IdempotencyRecord(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    id: str = Field(alias="_id")
    user: str
    job_id: str
    job_name: str
    body_sha256: str
    warnings: tuple[str, ...] = ()
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))  # removed KEEP_SECONDS after

    @staticmethod
    def id_of(user: str, key: str) -> str:
        return hashlib.sha256(f"{user}\0{key}".encode()).hexdigest()

    @classmethod
    def new(cls, *, user: str, key: str, job_id: str, job_name: str, body: bytes,
            warnings: tuple[str, ...]) -> IdempotencyRecord:
        return cls(id=cls.id_of(user, key), user=user, job_id=job_id, job_name=job_name,
                   body_sha256=body_digest(body), warnings=warnings)

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> IdempotencyRecord:
        return cls.model_validate(doc)
