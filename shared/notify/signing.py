"""A webhook's signature, and its signing key at rest.

Each webhook has its own key, made when it is created (:func:`new_secret`), shown to its owner once and
stored sealed with the platform's key (``PAIQ_SECRETS_KEY``: Fernet, as jobs' secrets are,
:mod:`shared.jobconfig.sealing`); an HMAC needs the key itself, so it is encrypted rather than hashed. Every
POST carries ``X-Paiq-Signature: sha256=<hex HMAC-SHA256 of the body>`` (the same header as
``examples/webhook_notifier.py``), which the receiver recomputes and compares in constant time. Pure.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from shared.jobconfig.sealing import SETTING, SealedValueError, SealingError, key_problem

SIGNATURE_HEADER = "X-Paiq-Signature"


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str) -> bool:
    return hmac.compare_digest(signature(secret, body), header)


def _fernet(key: str | None) -> MultiFernet:
    if not key:
        raise SealingError(f"webhooks' signing keys are sealed with {SETTING}, which is not set")
    problem = key_problem(key)
    if problem is not None:
        raise SealingError(f"{SETTING} {problem}")
    return MultiFernet([Fernet(part.strip().encode("ascii")) for part in key.split(",")])


def seal_secret(secret: str, key: str | None) -> str:
    return _fernet(key).encrypt(secret.encode()).decode("ascii")


def open_secret(sealed: str, key: str | None) -> str:
    try:
        return _fernet(key).decrypt(sealed.encode("ascii")).decode()
    except InvalidToken as e:
        raise SealedValueError("webhook signing key") from e
