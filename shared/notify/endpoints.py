"""Where a delivery goes, as the dispatcher lines them up and as lists show them. Pure."""

from __future__ import annotations

from urllib.parse import urlsplit

SMTP_LINE = "smtp"  # every address's mail goes through the one SMTP server


def endpoint_of(channel: str, target: str) -> str:
    """What a delivery waits its turn for: the SMTP server, or the webhook (its URL: two users' webhooks on one
    chat service are two endpoints, so one's dead path delays the other's messages no more than another host
    would)."""
    return SMTP_LINE if channel == "email" else target


def same_url(url: str) -> str:
    """A webhook's URL as compared with another's: scheme and host in lower case, the scheme's default port
    written out, an empty path as ``/``, no fragment (never sent); ``HTTPS://Hooks.Example:443/a`` and
    ``https://hooks.example/a`` are one webhook."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    except ValueError:  # not a port: compared as written
        return url
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}{parts.path or '/'}{query}"


def redacted(url: str) -> str:
    """A webhook's URL as a list of deliveries shows it: its origin only (a chat webhook's path is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/..." if parts.path not in ("", "/") or parts.query else url
