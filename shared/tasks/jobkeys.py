"""A job's SSH key pair, as OpenPAI made one per job: stored apart from the job (collection
``job_keys``, by job id), so the private key is never in a job document, an event, a list answer or a
log line. The submit service makes it; the launcher puts it in every container of the job; only the
job's owner or an admin can download the private key.

The key files are named after OpenPAI's framework name, ``user~jobName`` (seed 000:
``ssh -i userName~jobName -p ssh_port root@container_ip``), bounded so that both files fit the kernel's
limit on a file name (:mod:`shared.tasks.filenames`): the longest user and job names the protocol accepts make
a longer framework name.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr

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


class JobKey(BaseModel):
    """One job's key pair and the user's own keys admitted with it."""

    model_config = ConfigDict(frozen=True)
    job_id: str
    user: str
    job_name: str
    private_key: SecretStr
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

    def to_document(self) -> dict[str, Any]:
        return {"_id": self.job_id, "user": self.user, "job_name": self.job_name,
                "private_key": self.private_key.get_secret_value(), "public_key": self.public_key,
                "user_keys": list(self.user_keys), "created_ms": self.created_ms}

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> JobKey:
        return cls(job_id=str(doc["_id"]), user=str(doc["user"]), job_name=str(doc["job_name"]),
                   private_key=SecretStr(str(doc["private_key"])), public_key=str(doc["public_key"]),
                   user_keys=tuple(str(k) for k in doc.get("user_keys") or ()),
                   created_ms=int(doc.get("created_ms") or 0))
