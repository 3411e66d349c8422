"""Where a delivery goes, as the dispatcher lines them up and as lists show them. Pure."""

from __future__ import annotations

from urllib.parse import urlsplit

SMTP_LINE = "smtp"  # every address's mail goes through the one SMTP server


def endpoint_of(channel: str, target: str) -> str:
    """What a delivery waits its turn for: the SMTP server, or the webhook (its URL: two users' webhooks on one
    chat service are two endpoints, so one's dead path delays the other's messages no more than another host
    would)."""
    return SMTP_LINE if channel == "email" else target


def redacted(url: str) -> str:
    """A webhook's URL as a list of deliveries shows it: its origin only (a chat webhook's path is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/..." if parts.path not in ("", "/") or parts.query else url
