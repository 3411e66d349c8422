"""The notify service's metrics (served on its /metrics, or paiq up's): no user, job or endpoint label, so the
series stay as few as the channels and outcomes."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

NOTIFICATIONS = Counter("paiq_notifications_total", "Notification tries by channel (email, webhook) and outcome: "
                        "sent, retried (a failed try that will be tried again), failed (given up), held (past "
                        "the rate limit, for the window's digest)", ["channel", "outcome"])
DELIVERY_SECONDS = Histogram("paiq_notification_delivery_seconds", "From a job's change (its event's time) to its "
                             "message accepted by the SMTP server or the webhook, per channel", ["channel"],
                             buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600))
