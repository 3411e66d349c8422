"""The four services as separate processes over RabbitMQ and a private SecantusDB, for the benchmarks that
measure the control plane with their launcher paused: started, and afterwards taken down with all the
run left behind (the launcher killed so it never starts the thousands of tasks it was sent, the run's
queues and exchanges deleted, the work directory removed unless kept)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import docker

from shared.db.embedded import embedded_mongo
from tests.benchmarks.submit_to_scheduled import cleanup_broker
from tests.infra import Platform, start_platform, stop_platform


@contextlib.asynccontextmanager
async def separate_platform(name: str, mongo_uri: str | None, amqp_url: str, *, keep: bool,
                            **env: str) -> AsyncIterator[tuple[Platform, str]]:
    """The platform and the MongoDB URI it uses (a private in-memory SecantusDB unless ``mongo_uri``)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"paiq-{name}-"))
    async with contextlib.AsyncExitStack() as stack:
        uri = mongo_uri if mongo_uri else str(await stack.enter_async_context(embedded_mongo(None, cache_size="1G")))
        platform = await asyncio.to_thread(start_platform, "separate", workdir, mongo_uri=uri, amqp_url=amqp_url,
                                           new_session=False, **env)
        try:
            yield platform, uri
        finally:
            for p in platform.procs:  # the launcher never wakes up to start thousands of containers
                if "services.launcher" in str(p.args) and p.poll() is None:
                    p.kill()
                    p.wait()
            await asyncio.to_thread(stop_platform, platform, docker.from_env())
            await cleanup_broker(amqp_url, platform.env, platform.node_id)
            if keep:
                print(f"logs kept in {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
