"""Credentials at rest, at the submit service's start: with ``PAIQ_SECRETS_KEY``, what is stored is sealed
under its first key (:mod:`shared.db.resealing`: job keys an earlier paiq stored in clear, and everything
again after a key rotation); without it, the operator is told what the platform does without one."""

from __future__ import annotations

import os
import socket

import structlog

from shared.db.resealing import Sealed, clear_keys_left, seal_stored
from shared.db.store import Store
from shared.jobconfig.sealing import SETTING

log = structlog.get_logger("paiq.submit")

NO_KEY = (f"{SETTING} is not set: jobs get no SSH key pair (their SSH answers say why) and jobs with secrets or "
          f"registry credentials are refused; set it to a Fernet key (several separated by commas, the first "
          "sealing) to have both")
CLEAR_LEFT = (f"{SETTING} is not set, and SSH private keys that an earlier paiq stored in clear are still in the "
              f"database: set it, and the submit service seals them at its next start")


async def seal_at_rest(store: Store, secrets_key: str | None) -> Sealed | None:
    if secrets_key:
        return await seal_stored(store, secrets_key, f"{socket.gethostname()}-{os.getpid()}")
    log.warning(NO_KEY)
    if await clear_keys_left(store):
        log.warning(CLEAR_LEFT)
    return None
