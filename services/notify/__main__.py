"""python -m services.notify (needs PAIQ_MONGODB_URI and PAIQ_AMQP_URL)."""

from __future__ import annotations

import os

from services.notify import start
from shared.runtime.service import run_service

if __name__ == "__main__":
    run_service("notify", start, os.environ)
