"""A job's secrets at rest: sealed with the platform's key before the job is stored, opened only where a
task starts.

Protocol v2 jobs carry ``secrets`` (rendered into the container's command when a task starts) and inline
registry credentials (its ``auth``, with ``$secrets`` already rendered). Neither may be readable in the
database: :func:`seal_config` replaces them with Fernet tokens (AES-128-CBC with HMAC-SHA256, the
``cryptography`` package's) under the platform key (``PAIQ_SECRETS_KEY``), and the launcher opens them
with :func:`open_secrets` and :func:`open_registry_auth` just before it pulls an image or starts a task.

The sealed forms (what a stored :class:`~shared.jobconfig.model.JobConfig` holds):

- ``secrets``: ``{"$sealed": "<token of the secrets as JSON>"}`` (``{}`` when the job has none);
- each :class:`~shared.jobconfig.model.RegistryAuth`'s ``username`` and ``password``: ``"$sealed:<token>"``
  (empty values stay empty; ``registryuri`` stays readable: it says where, not who).

Other credentials at rest (a job's SSH private key, :mod:`shared.tasks.jobkeys`) are sealed as one text
each: :func:`seal_text` and :func:`open_text`.

The key is one or more Fernet keys separated by commas (:func:`new_key` makes one): the first seals,
every one opens, so a key is rotated by putting the new one first and dropping the old once nothing
stored needs it: :func:`reseal_text` and :func:`reseal_config` seal again under the first key what any
of them sealed, and :func:`key_fingerprint` says which first key that was (a digest, never the key).
Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from shared.errors import PaiqError
from shared.jobconfig.model import JobConfig, RegistryAuth

SETTING = "PAIQ_SECRETS_KEY"
SEALED_KEY = "$sealed"  # the one key of sealed secrets
SEALED_PREFIX = "$sealed:"  # a sealed registry username or password


class SealingError(PaiqError):
    """Secrets could not be sealed or opened."""


class SecretsKeyMissingError(SealingError):
    """A job has secrets (or registry credentials) and the service has no key to seal or open them."""

    def __init__(self, job_name: str) -> None:
        super().__init__(
            f"job {job_name} has secrets or registry credentials, and this platform has no key to keep them "
            f"sealed at rest: the operator sets {SETTING} (a Fernet key; `paiq up` makes one in its data "
            "directory)")
        self.job_name = job_name


class SealedValueError(SealingError):
    """A sealed value could not be opened: another key sealed it, or it was altered."""

    def __init__(self, what: str) -> None:
        super().__init__(f"the sealed {what} cannot be opened with {SETTING}: it was sealed with another key "
                         "(put that key back, after the new one) or altered")
        self.what = what


def new_key() -> str:
    """A fresh key for ``PAIQ_SECRETS_KEY``."""
    return Fernet.generate_key().decode("ascii")


def key_problem(text: str) -> str | None:
    """Why ``text`` is not a usable ``PAIQ_SECRETS_KEY`` (None: it is): comma-separated Fernet keys,
    each 32 bytes in URL-safe base64."""
    parts = [p.strip() for p in text.split(",")]
    for i, part in enumerate(parts):
        try:
            raw = base64.urlsafe_b64decode(part.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raw = b""
        if len(raw) != 32:
            which = f"key {i + 1} of {len(parts)}" if len(parts) > 1 else "the key"
            return (f"must be a Fernet key (32 bytes in URL-safe base64, 44 characters; several separated by "
                    f"commas, the first sealing), but {which} is not one")
    return None


def _fernet(key: str) -> MultiFernet:
    problem = key_problem(key)
    if problem is not None:
        raise SealingError(f"{SETTING} {problem}")
    return MultiFernet([Fernet(part.strip().encode("ascii")) for part in key.split(",")])


def key_fingerprint(key: str) -> str:
    """What names the key's first (sealing) part without telling it: a digest, as ``meta`` may record it."""
    first = key.split(",")[0].strip()
    return "sha256:" + hashlib.sha256(first.encode("ascii", "replace")).hexdigest()[:16]


def seal_text(text: str, key: str) -> str:
    """``text`` sealed under the key's first part: a Fernet token (URL-safe base64; nothing of the text)."""
    return _fernet(key).encrypt(text.encode("utf-8")).decode("ascii")


def open_text(token: str, key: str | None, what: str) -> str:
    """The text :func:`seal_text` sealed as ``token``; ``what`` names it in an error (never its value)."""
    if not key:
        raise SealingError(f"the {what} is sealed at rest and {SETTING} is not set here: the operator sets it "
                           "to the platform's key (the one the submit service seals with)")
    try:
        return _fernet(key).decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError) as e:
        raise SealedValueError(what) from e


def reseal_text(token: str, key: str, what: str) -> str:
    """``token`` sealed again under the key's first part (opened with any of them)."""
    try:
        return _fernet(key).rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError) as e:
        raise SealedValueError(what) from e


def reseal_config(config: JobConfig, key: str) -> JobConfig:
    """A stored config with its sealed secrets and registry credentials sealed again under the key's first
    part (values in clear, which a stored config never holds, are sealed too)."""
    if not needs_key(config):
        return config
    fernet = _fernet(key)
    secrets = config.secrets
    if secrets:
        token = secrets.get(SEALED_KEY)
        secrets = ({SEALED_KEY: reseal_text(token, key, f"secrets of job {config.job_name}")}
                   if set(secrets) == {SEALED_KEY} and isinstance(token, str)
                   else {SEALED_KEY: fernet.encrypt(_json(secrets)).decode("ascii")})
    roles = tuple(r.model_copy(update={"registry_auth": _reseal_auth(r.registry_auth, fernet)})
                  for r in config.task_roles)
    return config.model_copy(update={"secrets": secrets, "task_roles": roles,
                                     "registry_auth": _reseal_auth(config.registry_auth, fernet)})


def needs_key(config: JobConfig) -> bool:
    """Whether the job holds anything to seal (secrets, a registry username or password)."""
    auths = [config.registry_auth, *(r.registry_auth for r in config.task_roles)]
    return bool(config.secrets) or any(a is not None and (a.username or a.password) for a in auths)


def is_sealed(config: JobConfig) -> bool:
    """Whether the job's secrets are in their sealed form (or it has none)."""
    return not config.secrets or set(config.secrets) == {SEALED_KEY}


def seal_config(config: JobConfig, key: str | None) -> JobConfig:
    """``config`` as it may be stored: its secrets and registry credentials sealed. A job with none
    comes back as it is (no key needed); one with some and no key raises :class:`SecretsKeyMissingError`."""
    if not needs_key(config):
        return config
    if not key:
        raise SecretsKeyMissingError(config.job_name)
    fernet = _fernet(key)
    secrets = {SEALED_KEY: fernet.encrypt(_json(config.secrets)).decode("ascii")} if config.secrets else {}
    roles = tuple(r.model_copy(update={"registry_auth": _seal_auth(r.registry_auth, fernet)})
                  for r in config.task_roles)
    return config.model_copy(update={"secrets": secrets, "task_roles": roles,
                                     "registry_auth": _seal_auth(config.registry_auth, fernet)})


def open_secrets(config: JobConfig, key: str | None) -> dict[str, Any]:
    """The job's secrets as submitted (``{}`` when it has none), from its stored (sealed) config."""
    if not config.secrets:
        return {}
    token = config.secrets.get(SEALED_KEY)
    if set(config.secrets) != {SEALED_KEY} or not isinstance(token, str):
        raise SealingError(f"the secrets of job {config.job_name} are not sealed; a stored job's always are")
    if not key:
        raise SecretsKeyMissingError(config.job_name)
    try:
        opened = json.loads(_fernet(key).decrypt(token.encode("ascii")))
    except InvalidToken as e:
        raise SealedValueError(f"secrets of job {config.job_name}") from e
    if not isinstance(opened, dict):
        raise SealedValueError(f"secrets of job {config.job_name}")
    return opened


def open_registry_auth(auth: RegistryAuth | None, key: str | None) -> RegistryAuth | None:
    """Registry credentials as given (username and password opened), from a stored config's
    (``config.registry_auth`` or a role's). None stays None; unsealed values are returned as they are."""
    if auth is None or not (_sealed(auth.username) or _sealed(auth.password)):
        return auth
    if not key:
        raise SealingError(f"registry credentials for {auth.registry_uri or 'Docker Hub'} are sealed and "
                           f"{SETTING} is not set")
    fernet = _fernet(key)
    return auth.model_copy(update={"username": _open(auth.username, fernet, "registry username"),
                                   "password": _open(auth.password, fernet, "registry password")})


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


def _seal_auth(auth: RegistryAuth | None, fernet: MultiFernet) -> RegistryAuth | None:
    if auth is None:
        return None
    return auth.model_copy(update={"username": _seal(auth.username, fernet), "password": _seal(auth.password, fernet)})


def _seal(value: str, fernet: MultiFernet) -> str:
    if not value or _sealed(value):
        return value
    return SEALED_PREFIX + fernet.encrypt(value.encode("utf-8")).decode("ascii")


def _reseal_auth(auth: RegistryAuth | None, fernet: MultiFernet) -> RegistryAuth | None:
    if auth is None:
        return None
    return auth.model_copy(update={"username": _reseal(auth.username, fernet, "registry username"),
                                   "password": _reseal(auth.password, fernet, "registry password")})


def _reseal(value: str, fernet: MultiFernet, what: str) -> str:
    if not _sealed(value):
        return _seal(value, fernet)
    try:
        return SEALED_PREFIX + fernet.rotate(value[len(SEALED_PREFIX):].encode("ascii")).decode("ascii")
    except InvalidToken as e:
        raise SealedValueError(what) from e


def _open(value: str, fernet: MultiFernet, what: str) -> str:
    if not _sealed(value):
        return value
    try:
        return fernet.decrypt(value[len(SEALED_PREFIX):].encode("ascii")).decode("utf-8")
    except InvalidToken as e:
        raise SealedValueError(what) from e
