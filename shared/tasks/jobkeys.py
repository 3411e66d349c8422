"""A job's SSH key pair, as OpenPAI made one per job: stored apart from the job (collection
``job_keys``, by job id), so the private key is never in a job document, an event, a list answer or a
log line. The submit service makes it; the launcher puts it in every container of the job; only the
job's owner or an admin can download the private key.

At rest the private key is sealed (issue 35): :class:`JobKey` is the pair in memory, made at submit
and opened where it is used; :meth:`JobKey.sealed` makes the :class:`StoredJobKey` that is stored, whose
``sealed_private_key`` is a Fernet token under ``PAIQ_SECRETS_KEY`` (:func:`shared.jobconfig.sealing.seal_text`),
and :meth:`StoredJobKey.opened` gives the pair back (the launcher, just before it writes a container's
files; the submit service, just before it answers the download). A field of its own, not a ``$sealed:``
prefix on ``private_key``: a query tells the documents an earlier paiq wrote in clear (``private_key``)
from sealed ones without reading them, which the sealing pass at the submit service's start relies on
(:mod:`shared.db.resealing`), and a reader knows which form it holds by the field, not by its text.

The key files are named after OpenPAI's framework name, ``user~jobName`` (seed 000:
``ssh -i userName~jobName -p ssh_port root@container_ip``), bounded so that both files fit the kernel's
limit on a file name (:mod:`shared.tasks.filenames`): the longest user and job names the protocol accepts make
a longer framework name.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr

from shared.jobconfig.sealing import open_text, reseal_text, seal_text
from shared.tasks.filenames import NAME_MAX, fitted

# The environment variable of jobEnvs with the user's own public key(s), admitted beside the job's.
USER_KEY_VARIABLE = "PAI_SSH_PUB_KEY"
# One OpenSSH public key line: type, base64 body, optional comment; no options before it (an option
# such as command="..." would change what a login may do).
_KEY_TYPES = (r"(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp(?:256|384|521)"
              r"|sk-(?:ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)")
PUBLIC_KEY_PATTERN = re.compile(rf"{_KEY_TYPES} [A-Za-z0-9+/]+={{0,3}}(?: [^\r\n]*)?")
MAX_USER_KEYS = 16


PUBLIC_SUFFIX = ".pub"
KEY_NAME_MAX = NAME_MAX - len(PUBLIC_SUFFIX)  # bytes: ``<name>.pub`` is a file name too


def key_name(user: str, job_name: str) -> str:
    """The key files' name: OpenPAI's framework name of the job, ``user~jobName``; past KEY_NAME_MAX bytes
    its first bytes and a digest of the whole (:func:`shared.tasks.filenames.fitted`). The private key is
    ``/root/.ssh/<name>`` in every task and ``privateKeyFileName`` in the API, the public one ``<name>.pub``."""
    return fitted(f"{user}~{job_name}", KEY_NAME_MAX)


def user_keys(text: str) -> tuple[str, ...] | str:
    """The public keys in a ``PAI_SSH_PUB_KEY`` value (one a line), or why it is refused."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "must hold at least one OpenSSH public key (the text of a .pub file)"
    if len(lines) > MAX_USER_KEYS:
        return f"must hold at most {MAX_USER_KEYS} public keys, got {len(lines)}"
    for i, line in enumerate(lines, 1):
        if not PUBLIC_KEY_PATTERN.fullmatch(line):
            shown = line if len(line) <= 40 else line[:37] + "..."
            return (f"line {i} is not an OpenSSH public key like 'ssh-ed25519 AAAA... me@host' "
                    f"(no options before the key type), got {shown!r}")
    return tuple(lines)


SEALED_FIELD = "sealed_private_key"  # a stored key's private key, sealed (a Fernet token)
CLEAR_FIELD = "private_key"  # the private key in clear: only in documents an earlier paiq wrote


class _KeyPair(BaseModel):
    """What a job's key pair is besides its private key."""

    model_config = ConfigDict(frozen=True)
    job_id: str
    user: str
    job_name: str
    public_key: str
    user_keys: tuple[str, ...] = ()
    created_ms: int = 0

    @property
    def name(self) -> str:
        return key_name(self.user, self.job_name)

    @property
    def authorized_keys(self) -> str:
        """``authorized_keys`` of every container: the job's key, then the user's own."""
        return "".join(f"{k}\n" for k in (self.public_key, *self.user_keys))

    @property
    def what(self) -> str:
        """How an error names the private key (never its value)."""
        return f"SSH private key of job {self.job_name} of {self.user}"


class JobKey(_KeyPair):
    """One job's key pair, its private key opened (in memory only), and the user's own keys admitted with it."""

    private_key: SecretStr

    def sealed(self, secrets_key: str) -> StoredJobKey:
        """The pair as it is stored: its private key sealed under the first part of ``secrets_key``."""
        return StoredJobKey(**self.model_dump(exclude={"private_key"}),
                            sealed_private_key=seal_text(self.private_key.get_secret_value(), secrets_key))

    def to_document(self, secrets_key: str) -> dict[str, Any]:
        return self.sealed(secrets_key).to_document()


class StoredJobKey(_KeyPair):
    """A job's key pair as stored: its private key sealed, or (a document an earlier paiq wrote) in clear."""

    sealed_private_key: str = ""
    clear_private_key: SecretStr | None = None

    def opened(self, secrets_key: str | None) -> JobKey:
        """The pair with its private key opened; :class:`~shared.jobconfig.sealing.SealingError` naming
        ``PAIQ_SECRETS_KEY`` when this service has no key, or not the one that sealed it."""
        private = (self.clear_private_key if self.clear_private_key is not None
                   else SecretStr(open_text(self.sealed_private_key, secrets_key, self.what)))
        return JobKey(**self.model_dump(exclude={"sealed_private_key", "clear_private_key"}), private_key=private)

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"_id": self.job_id, "user": self.user, "job_name": self.job_name,
                               "public_key": self.public_key, "user_keys": list(self.user_keys),
                               "created_ms": self.created_ms}
        if self.clear_private_key is not None:
            doc[CLEAR_FIELD] = self.clear_private_key.get_secret_value()
        else:
            doc[SEALED_FIELD] = self.sealed_private_key
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> StoredJobKey:
        clear = doc.get(CLEAR_FIELD)
        return cls(job_id=str(doc["_id"]), user=str(doc["user"]), job_name=str(doc["job_name"]),
                   public_key=str(doc["public_key"]), user_keys=tuple(str(k) for k in doc.get("user_keys") or ()),
                   created_ms=int(doc.get("created_ms") or 0), sealed_private_key=str(doc.get(SEALED_FIELD) or ""),
                   clear_private_key=None if clear is None else SecretStr(str(clear)))


def resealed(doc: dict[str, Any], secrets_key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The write that seals a stored key document under the first part of ``secrets_key``, as a filter
    and an update (each matching only the document as it was read), or None when it holds no private key.
    A key in clear is sealed and its clear field removed; a sealed one is sealed again (opened with any
    part of the key)."""
    found = StoredJobKey.from_document(doc)
    if found.clear_private_key is not None:
        token = seal_text(found.clear_private_key.get_secret_value(), secrets_key)
        return ({"_id": doc["_id"], CLEAR_FIELD: {"$exists": True}},
                {"$set": {SEALED_FIELD: token}, "$unset": {CLEAR_FIELD: ""}})
    if not found.sealed_private_key:
        return None
    token = reseal_text(found.sealed_private_key, secrets_key, found.what)
    return {"_id": doc["_id"], SEALED_FIELD: found.sealed_private_key}, {"$set": {SEALED_FIELD: token}}
