"""The syntaxes of ``PAIQ_*`` values, as pure functions from the variable's text.

Each raises :class:`ValueError` whose text is the rule, worded to follow the variable's name ("must be an
integer, got 'http'"); :mod:`shared.settings.model` wires them into its pydantic-settings model and turns a
refusal into a one-line :class:`~shared.errors.SettingsError`. Values are quoted with :func:`quoted`, so a
message stays one line whatever the variable holds.
"""

from __future__ import annotations

import math
import re

GpuList = tuple[tuple[int, str], ...]
QUOTED_CHARS = 80  # of a refused value quoted in a message (a node id is at most 64)


def quoted(raw: str) -> str:
    """``raw`` as a message quotes it: ``repr`` (control characters escaped), cut after QUOTED_CHARS characters."""
    return repr(raw) if len(raw) <= QUOTED_CHARS else repr(raw[:QUOTED_CHARS]) + "..."


def _digits(text: str) -> bool:
    """ASCII digits only (str.isdigit also accepts '²')."""
    return text.isascii() and text.isdigit()


def parse_integer(raw: str) -> int:
    """Python's ``int()`` syntax: ``" 42 "``, ``"+5"``, ``"1_000"``; never ``"1.0"``."""
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"must be an integer, got {quoted(raw)}") from None


def parse_port_range(raw: str) -> tuple[int, int]:
    """``"20000-29999"`` -> (20000, 29999), both inside 1-65535, the first not above the last."""
    lo, sep, hi = raw.partition("-")
    if not sep or not _digits(lo.strip()) or not _digits(hi.strip()):
        raise ValueError(f"must look like 20000-29999, got {quoted(raw)}")
    first, last = int(lo), int(hi)
    if not 0 < first <= last < 65536:
        raise ValueError(f"must be an ascending range inside 1-65535, got {quoted(raw)}")
    return first, last


def parse_gpus(raw: str) -> GpuList:
    """``"0:V100,1:V100,2:K80"`` or ``"4xV100"`` -> ((index, type), ...); blank: no GPUs."""
    text = raw.strip()
    if not text:
        return ()
    if "x" in text and ":" not in text:
        count, _, kind = text.partition("x")
        if not _digits(count) or not kind:
            raise ValueError(f"must look like 4xV100, got {quoted(raw)}")
        return tuple((i, kind) for i in range(int(count)))
    gpus: list[tuple[int, str]] = []
    for item in text.split(","):
        idx, sep, kind = item.strip().partition(":")
        if not sep or not _digits(idx) or not kind:
            raise ValueError(f"must look like 0:V100,1:V100 or 4xV100, got {quoted(raw)}")
        gpus.append((int(idx), kind))
    if len({i for i, _ in gpus}) != len(gpus):
        raise ValueError(f"must not repeat a GPU index, got {quoted(raw)}")
    return tuple(gpus)


def parse_switch(raw: str) -> bool:
    """``1``/``true`` or ``0``/``false``, in any case, blanks around ignored."""
    word = raw.strip().lower()
    if word not in {"1", "0", "true", "false"}:
        raise ValueError(f"must be 1, 0, true or false, got {quoted(raw)}")
    return word in {"1", "true"}


def parse_network(raw: str) -> str:
    if raw not in {"host", "bridge"}:
        raise ValueError(f"must be host or bridge, got {quoted(raw)}")
    return raw


_NETWORK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def check_network_name(raw: str) -> str:
    """A Docker network's name: letters, digits, ``_``, ``.``, ``-``, at most 63, not ``host``, ``bridge``
    or ``none`` (Docker's own, which isolate nothing)."""
    text = raw.strip()
    if not _NETWORK_NAME.fullmatch(text):
        raise ValueError(f"must be a Docker network name (letters, digits, _ . -, at most 63), got {quoted(raw)}")
    if text in {"host", "bridge", "none", "default"}:
        raise ValueError(f"must be a network of paiq's own, not Docker's {quoted(raw)}")
    return text


def parse_gpu_devices(raw: str) -> str:
    if raw not in {"nvidia", "none"}:
        raise ValueError(f"must be nvidia or none, got {quoted(raw)}")
    return raw


def parse_cache_size(raw: str) -> str:
    """``"512m"`` -> ``"512M"``: 1-999999 megabytes or gigabytes, or ``auto`` (``"AUTO"``: from the machine)."""
    size = raw.strip().upper()
    if size != "AUTO" and not re.fullmatch(r"[1-9][0-9]{0,5}[MG]", size):
        raise ValueError(f"must be auto or a size like 512M or 2G, got {quoted(raw)}")
    return size


MAX_RETENTION_DAYS = 100_000


def parse_days(raw: str) -> float:
    """A number of days, fractions allowed: 0 (keep forever) up to, not including, 100,000."""
    try:
        days = float(raw.strip())
    except ValueError:
        raise ValueError(f"must be a number of days (0: keep forever), got {quoted(raw)}") from None
    if not (math.isfinite(days) and 0 <= days < MAX_RETENTION_DAYS):
        raise ValueError(f"must be 0 (keep forever) or a positive number of days below {MAX_RETENTION_DAYS:,}, "
                         f"got {quoted(raw)}")
    return days


def parse_hours(raw: str) -> float:
    """A number of hours, fractions allowed: 0 (keep for ever) up to, not including, 100,000 days' worth."""
    try:
        hours = float(raw.strip())
    except ValueError:
        raise ValueError(f"must be a number of hours (0: keep for ever), got {quoted(raw)}") from None
    if not (math.isfinite(hours) and 0 <= hours < MAX_RETENTION_DAYS * 24):
        raise ValueError(f"must be 0 (keep for ever) or a positive number of hours below {MAX_RETENTION_DAYS * 24:,}, "
                         f"got {quoted(raw)}")
    return hours


NODE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_node_id(node_id: str) -> str:
    """A word of routing keys (``node.<id>.launch``) and a container label."""
    if not NODE_ID.fullmatch(node_id):
        raise ValueError(f"must be 1-64 letters, digits, '-' or '_', got {quoted(node_id)}")
    return node_id


def node_id_of_host(host_name: str) -> str:
    """The default node id: the host name with anything but letters, digits, '-' and '_' as '-'."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", host_name)


def check_port_or_unset(port: int) -> int:
    """A port number, or 0 for "not set here" (the next fallback applies)."""
    if not 0 <= port < 65536:
        raise ValueError(f"must be a port number 1-65535 (0: not set), got {port}")
    return port


def check_mongodb_uri(raw: str) -> str:
    """A MongoDB connection string that logs in: a user in it (``mongodb://user:password@host/...``), or
    ``authMechanism=MONGODB-X509`` (a client certificate). paiq never talks to a server that lets anyone
    in: whatever reaches it (a task, another user of the host) could read every job's keys and make itself
    an administrator."""
    text = raw.strip()
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in ("mongodb", "mongodb+srv"):
        raise ValueError(f"must be a mongodb:// or mongodb+srv:// connection string, got {_scheme_only(raw)}")
    authority, _, query = rest.partition("?")
    user = authority.split("/", 1)[0].rpartition("@")[0].partition(":")[0]
    if not user and "authmechanism=mongodb-x509" not in query.lower():
        raise ValueError("must log in: paiq never uses a MongoDB without authentication (anything that reaches "
                         "it could read every job's keys and make itself an administrator); create a user and "
                         "put it in the string, mongodb://USER:PASSWORD@HOST:27017/?authSource=admin, or use "
                         "authMechanism=MONGODB-X509")
    return text


def check_amqp_url(raw: str) -> str:
    """A RabbitMQ URL with a user of paiq's own: never none (aio-pika then logs in as ``guest``) nor
    ``guest``, the account every RabbitMQ is installed with and every reader of its manual knows."""
    text = raw.strip()
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in ("amqp", "amqps"):
        raise ValueError(f"must be an amqp:// or amqps:// URL, got {_scheme_only(raw)}")
    user = rest.split("/", 1)[0].rpartition("@")[0].partition(":")[0]
    if user in ("", "guest"):
        raise ValueError("must log in as a user of paiq's own, not RabbitMQ's guest account "
                         f"({'none given' if not user else 'guest given'}): rabbitmqctl add_user paiq PASSWORD; "
                         'rabbitmqctl set_permissions paiq ".*" ".*" ".*"; then amqp://paiq:PASSWORD@HOST:5672/')
    return text


def _scheme_only(raw: str) -> str:
    """What a refusal may quote of a connection string: never its password (only up to ``://``)."""
    scheme, sep, _ = raw.strip().partition("://")
    return quoted(scheme + sep + "...") if sep else "a value without a scheme"
