"""Where a delivery goes, as the dispatcher lines them up and as lists show them. Pure."""

from __future__ import annotations

from urllib.parse import urlsplit

SMTP_LINE = "smtp"  # every address's mail goes through the one SMTP server


def endpoint_of(channel: str, target: str) -> str:
    """What a delivery waits its turn for: the SMTP server, or a webhook's origin."""
    if channel == "email":
        return SMTP_LINE
    parts = urlsplit(target)
    return f"{parts.scheme}://{parts.netloc}"


def redacted(url: str) -> str:
    """A webhook's URL as a list of deliveries shows it: its origin only (a chat webhook's path is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/..." if parts.path not in ("", "/") or parts.query else url
