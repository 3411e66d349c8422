"""Refuse to run beside a database or a broker that lets anyone in.

paiq always logs in (:mod:`shared.settings.syntax`: a MongoDB URI with a user, an AMQP URL with a user of
its own). That is not enough if the server itself admits callers without one: a mongod started without
``--auth`` serves whoever reaches its port, and a RabbitMQ that still has its ``guest`` account lets a
process on its host publish commands to every node (a launch of any image). So a service checks once, at
start, as a stranger would: a read without a login, a connection as ``guest``. Either succeeding stops it
with one line naming the server and the remedy; a server that cannot be reached at all is left to the
service's own connection, which says so.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aio_pika
from aio_pika.connection import make_url
from aiormq.exceptions import AMQPError
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure, PyMongoError

from shared.errors import PaiqError

PROBE_SECONDS = 5.0
_AUTH_PARAMS = {"authsource", "authmechanism", "authmechanismproperties"}


class OpenServerError(PaiqError):
    """The database or the broker admits callers without a login."""


def without_login(uri: str) -> str:
    """``uri`` with its user, password and authentication options removed (pure)."""
    parts = urlsplit(uri)
    host = parts.netloc.rpartition("@")[2]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k.lower() not in _AUTH_PARAMS])
    return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))


def as_guest(url: str) -> str:
    """``url`` with RabbitMQ's guest account as its login (pure)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"guest:guest@{host}", parts.path, parts.query, parts.fragment))


async def refuse_open_database(uri: str, database: str) -> None:
    """OpenServerError when the MongoDB at ``uri`` answers a read of ``database`` to a caller without a login."""
    stranger: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        without_login(uri), serverSelectionTimeoutMS=int(PROBE_SECONDS * 1000), timeoutMS=int(PROBE_SECONDS * 1000))
    try:
        await stranger[database].list_collection_names()
    except OperationFailure:
        return  # refused (Unauthorized): as it must be
    except PyMongoError:
        return  # not reached: the service's own connection says so
    finally:
        await stranger.close()
    where = urlsplit(without_login(uri)).netloc
    raise OpenServerError(f"the MongoDB at {where} answers without a login: anything that reaches it could read "
                          "every job's keys and make itself an administrator; start it with authentication "
                          "(mongod --auth, or security.authorization: enabled) before paiq uses it")


async def refuse_guest_broker(url: str) -> None:
    """OpenServerError when the RabbitMQ at ``url`` admits its ``guest`` account."""
    # made here rather than by aio_pika.connect, which drops a connection it could not open unclosed (its
    # finaliser then schedules a close nobody awaits)
    connection = aio_pika.Connection(make_url(as_guest(url)))
    try:
        await connection.connect(timeout=PROBE_SECONDS)
    except (AMQPError, OSError, TimeoutError):
        # refused: its login (AMQPConnectionError), or this virtual host to it (the broker answers the open with a
        # close: InvalidFrameError); or not reached: the service's own connection says so
        return
    finally:
        await connection.close()
    where = urlsplit(url).netloc.rpartition("@")[2]
    raise OpenServerError(f"the RabbitMQ at {where} admits its guest account: a process on its host could publish "
                          "commands to every node; remove it (rabbitmqctl delete_user guest) before paiq uses it")
