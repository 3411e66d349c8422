"""The composition root: run several (or all) services in one process, as ``paiq up`` does.

This is the only module that knows every service. Alone on a machine it needs nothing but a Docker
engine: MongoDB is an embedded SecantusDB (its login made once in the data directory, ``db-login.json``,
mode 0600) unless PAIQ_MONGODB_URI is set, and the bus is in-process
unless PAIQ_AMQP_URL is set. The local engine is the one node. Jobs' secrets are sealed with
PAIQ_SECRETS_KEY, else with a key made once in the data directory (``secrets.key``, mode 0600).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import structlog

from services import launcher, notify, scheduler, status, submit
from shared.db.embedded import embedded_mongo, local_login
from shared.db.footprint import disk_bytes, outgrowing, resolve_cache_size, size_bytes
from shared.db.store import Store, open_store
from shared.jobconfig.sealing import SETTING as SECRETS_KEY_SETTING
from shared.jobconfig.sealing import key_problem, new_key
from shared.ops import metrics
from shared.ops.vitals import Vitals
from shared.runtime.relay import start_relay
from shared.runtime.service import Starter, open_bus, refuse_open_servers, watch_dependencies
from shared.settings.model import Settings

log = structlog.get_logger("paiq.platform")

# Start order: consumers first, the API last, so nothing is accepted before it can be handled.
SERVICES: dict[str, Starter] = {
    "status": status.start,
    "scheduler": scheduler.start,
    "launcher": launcher.start,
    "notify": notify.start,
    "submit": submit.start,
}


SECRETS_KEY_FILE = "secrets.key"
FOOTPRINT_SECONDS = 60


def local_secrets_key(data_dir: Path) -> str:
    """The key in ``data_dir/secrets.key``, made there (readable by its owner only) the first time."""
    path = data_dir / SECRETS_KEY_FILE
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        data_dir.mkdir(parents=True, exist_ok=True)
        key = new_key()
        try:
            with open(path, "x", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
                f.write(key + "\n")
        except FileExistsError:  # another paiq up made it meanwhile: use theirs
            return local_secrets_key(data_dir)
        log.info("made a key to seal jobs' secrets", path=str(path))
        return key
    problem = key_problem(key)
    if problem is not None:
        raise ValueError(f"{path} (the key paiq up made for {SECRETS_KEY_SETTING}) {problem}: restore it, or set "
                         f"{SECRETS_KEY_SETTING}")
    return key


def with_secrets_key(settings: Settings) -> Settings:
    """``settings`` with PAIQ_SECRETS_KEY, the data directory's own key when the variable is unset."""
    if settings.secrets_key:
        return settings
    return settings.model_copy(update={"secrets_key": local_secrets_key(settings.data_dir)})


def private_data_dir(data_dir: Path) -> None:
    """The data directory is its owner's alone (0700): the database, its login, the secrets key and the saved
    token are in it. Only the top is closed: the default file system (``fs``) below it is the operator's to
    open to the users who put code there."""
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)


def watch_footprint(stack: AsyncExitStack, vitals: Vitals, storage: Path, cache: int) -> None:
    """What the embedded database holds against its cache: said at start past 70%, a gauge every minute."""
    metrics.EMBEDDED_DB_CACHE.labels(str(storage)).set(cache)
    stored = disk_bytes(storage)
    metrics.EMBEDDED_DB_STORED.labels(str(storage)).set(stored)
    warning = outgrowing(stored, cache)
    if warning:
        log.warning(warning)

    async def measure() -> None:
        metrics.EMBEDDED_DB_STORED.labels(str(storage)).set(disk_bytes(storage))  # a listing: a few hundred files

    vitals.periodic(stack, "embedded-db-footprint", FOOTPRINT_SECONDS, measure)


@asynccontextmanager
async def running_platform(settings: Settings, vitals: Vitals,
                           names: Sequence[str] = tuple(SERVICES)) -> AsyncIterator[Store]:
    unknown = set(names) - set(SERVICES)
    if unknown:
        raise ValueError(f"unknown service(s): {', '.join(sorted(unknown))}")
    settings = with_secrets_key(settings)
    await refuse_open_servers(settings)  # a database or broker of the operator's (the embedded one has its login)
    async with AsyncExitStack() as stack:
        uri = settings.mongodb_uri
        stores: list[Store] = []

        def database_exited(reason: str) -> None:  # the process stops without calling it again on the way out
            for store in stores:
                store.gone = reason
            vitals.fail(reason)

        if uri is None:
            private_data_dir(settings.data_dir)
            cache = resolve_cache_size(settings.embedded_db_cache)
            uri = await stack.enter_async_context(
                embedded_mongo(settings.data_dir / "db", login=local_login(settings.data_dir),
                               log_file=settings.data_dir / "db.log", cache_size=cache, on_exit=database_exited))
            log.info("embedded MongoDB-wire server started", storage=str(settings.data_dir / "db"), cache=cache)
            watch_footprint(stack, vitals, settings.data_dir / "db", size_bytes(cache))
        store = await stack.enter_async_context(open_store(uri, settings.database, settings.mongodb_timeout_seconds))
        stores.append(store)
        bus = await stack.enter_async_context(open_bus(settings))
        watch_dependencies(vitals, store, bus, stack)
        await start_relay(stack, store, bus, vitals, queue_prefix=settings.queue_prefix,
                          retention_hours=settings.event_retention_hours)
        for name in SERVICES:
            if name in names:
                await SERVICES[name](stack, settings, store, bus, vitals)
        yield store
