"""The notify service: tells users of their jobs' changes by email and webhook (docs "Notifications").

``start`` wires the service into a running process (its own, or ``paiq up``).
"""

from __future__ import annotations

from services.notify.service import start_notify as start

__all__ = ["start"]
