"""Benchmark: what 1,000 live nodes cost the control plane while nothing happens.

    .venv/bin/python tests/benchmarks/nodes.py [--nodes 1000 --seconds 300 --sample-seconds 60
        --reconcile-seconds 10 --node-timeout-seconds 40] [--mongo-uri URI] [--keep] [--smoke]

Starts a private in-memory SecantusDB (or uses --mongo-uri) and the services as separate processes over
the real RabbitMQ (tests/infra.py's ``start_platform("separate", ...)``) with the product's timings
(PAIQ_RECONCILE_SECONDS 10, PAIQ_NODE_TIMEOUT_SECONDS 40). The platform's own launcher is killed once its
node has registered and that node is deleted, so the cluster is exactly the simulated nodes; scheduler,
status and submit run as they would.

--nodes launcher agents without containers are simulated in this process with asyncio, over one shared
``Store`` (one AsyncMongoClient) and one aio-pika connection with one channel. Each does what
``services/launcher/service.py`` ``start_launcher`` does apart from Docker: declares its queue
``<prefix>.launcher.<id>`` (exclusive here, so it goes with the connection; same dead-letter argument) bound
to ``node.<id>.#`` and consumes nothing, ``store.upsert_node(node_record(...))`` (64 CPUs, 512 GiB, 8 V100s),
publishes ``node.registered``, then ``store.heartbeat`` every node timeout / 4 seconds and its reconcile's
store read ``store.jobs_on_node`` every PAIQ_RECONCILE_SECONDS, each loop at a random phase (agents start at
different times). All register at once; the measurement starts two reconcile periods after the last one.

Over --seconds it samples, every --sample-seconds, the CPU (from /proc/<pid>/stat) of the scheduler, the
status service, submit, SecantusDB, RabbitMQ and this process (the simulated agents), as percent of one
core. Prints a table (a sample per row, then the whole run) and, as its last line, one JSON object:
``scheduler_cpu_percent``, ``status_cpu_percent``, ``db_cpu_percent`` (the whole run; target: each under
20), ``bench_cpu_percent``, ``nodes``, ``seconds``, the samples, the agents' store calls and their latency,
and how many nodes were lost (0 expected; exit status 1 otherwise, or if an agent's call failed). The
services' pids go to stderr at the start, for py-spy.

``--smoke``: 20 nodes over 4 seconds in two samples, PAIQ_RECONCILE_SECONDS 1, PAIQ_NODE_TIMEOUT_SECONDS 8
(seconds: that the benchmark runs, not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aio_pika

from shared.bus.amqp import AmqpBus
from shared.db.store import Store, open_store
from shared.events import NodeRegistered, NodeRegisteredData
from shared.records import GpuInfo, NodeRecord, now_ms
from shared.settings.model import Settings
from tests.benchmarks.burst import pass_metrics
from tests.benchmarks.figures import percentile
from tests.benchmarks.platform_run import separate_platform
from tests.benchmarks.submit_to_scheduled import cpu_seconds, processes
from tests.infra import Platform

GPUS = tuple(GpuInfo(index=i, type="V100") for i in range(8))


@dataclass(frozen=True)
class Options:
    nodes: int
    seconds: float
    sample_s: float
    reconcile_s: int
    node_timeout_s: int
    amqp_url: str
    mongo_uri: str | None
    keep: bool


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000, help="simulated launcher agents")
    p.add_argument("--seconds", type=float, default=300.0, help="length of the measurement")
    p.add_argument("--sample-seconds", type=float, default=60.0, help="one CPU sample every so many seconds")
    p.add_argument("--reconcile-seconds", type=int, default=10, help="PAIQ_RECONCILE_SECONDS")
    p.add_argument("--node-timeout-seconds", type=int, default=40, help="PAIQ_NODE_TIMEOUT_SECONDS")
    p.add_argument("--amqp-url", default=os.environ.get("PAIQ_TEST_AMQP_URL", "amqp://paiq:PASSWORD@127.0.0.1:5672/"))
    p.add_argument("--mongo-uri", default=os.environ.get("PAIQ_TEST_MONGODB_URI"),
                   help="default: a private in-memory SecantusDB")
    p.add_argument("--keep", action="store_true", help="keep the work directory (service logs)")
    p.add_argument("--smoke", action="store_true", help="a small run: 20 nodes over 4 seconds")
    a = p.parse_args(argv)
    if a.smoke:
        a.nodes, a.seconds, a.sample_seconds, a.reconcile_seconds, a.node_timeout_seconds = 20, 4.0, 2.0, 1, 8
    return Options(nodes=a.nodes, seconds=a.seconds, sample_s=a.sample_seconds, reconcile_s=a.reconcile_seconds,
                   node_timeout_s=a.node_timeout_seconds, amqp_url=a.amqp_url, mongo_uri=a.mongo_uri, keep=a.keep)


def node(k: int) -> NodeRecord:
    return NodeRecord(id=f"sim-{k:05d}", ip=f"10.{k // 65536 % 256}.{k // 256 % 256}.{k % 256}", cpus=64,
                      memory_mb=512 * 1024, gpus=GPUS, port_range=(20000, 29999), heartbeat_ms=now_ms())


# --- the simulated agents -----------------------------------------------------------------------


@dataclass
class Calls:
    """Store calls the agents made (while ``counting``) and how long each took."""

    counting: bool = False
    heartbeats: list[float] = field(default_factory=list)
    reconciles: list[float] = field(default_factory=list)
    failures: int = 0


@dataclass
class Agents:
    store: Store
    channel: aio_pika.abc.AbstractChannel
    bus: AmqpBus
    exchange: aio_pika.abc.AbstractExchange
    prefix: str
    o: Options
    calls: Calls = field(default_factory=Calls)

    async def register(self, k: int) -> None:
        """What start_launcher does before its loops: the queue and its binding, the node, the event."""
        record = node(k)
        queue = await self.channel.declare_queue(
            f"{self.prefix}.launcher.{record.id}", durable=False, exclusive=True,
            arguments={"x-dead-letter-exchange": f"{self.prefix}.dead"})
        await queue.bind(self.exchange, routing_key=f"node.{record.id}.#")
        await self.store.upsert_node(record)
        await self.bus.publish([NodeRegistered(data=NodeRegisteredData(node_id=record.id))])

    async def loop(self, period: float, rng: random.Random, call: Callable[[], Awaitable[None]],
                   times: list[float]) -> None:
        await asyncio.sleep(rng.uniform(0, period))
        while True:
            t0 = time.perf_counter()
            try:
                await call()
            except Exception:  # a real agent logs it and tries again next round
                self.calls.failures += 1
            if self.calls.counting:
                times.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(period)

    def start(self, k: int, rng: random.Random) -> list[asyncio.Task[None]]:
        node_id = node(k).id

        async def heartbeat() -> None:
            await self.store.heartbeat(node_id)

        async def reconcile() -> None:
            await self.store.jobs_on_node(node_id)

        return [asyncio.create_task(self.loop(self.o.node_timeout_s / 4, rng, heartbeat, self.calls.heartbeats)),
                asyncio.create_task(self.loop(self.o.reconcile_s, rng, reconcile, self.calls.reconciles))]


# --- the run ------------------------------------------------------------------------------------


@dataclass
class Sample:
    at_s: float
    seconds: float
    cpu_percent: dict[str, float]


@dataclass
class Result:
    register_s: float
    samples: list[Sample]
    overall: Sample
    calls: Calls
    passes: int
    pass_mean_ms: float
    lost: int


async def only_simulated_nodes(platform: Platform, store: Store) -> None:
    """Kill the platform's launcher once its node registered, and forget that node."""
    deadline = time.monotonic() + 60
    while await store.nodes.find_one({"_id": platform.node_id}) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the launcher did not register its node:\n" + platform.logs()[-3000:])
        await asyncio.sleep(0.2)
    launcher = next(p for p in platform.procs if "services.launcher" in str(p.args))
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    await store.nodes.delete_one({"_id": platform.node_id})


def usage(pids: dict[str, int]) -> tuple[float, dict[str, float]]:
    return time.monotonic(), {n: cpu_seconds(p) for n, p in pids.items()}


def percent(at_s: float, before: tuple[float, dict[str, float]], after: tuple[float, dict[str, float]]) -> Sample:
    wall = after[0] - before[0]
    return Sample(at_s=round(at_s, 1), seconds=round(wall, 1),
                  cpu_percent={n: round(100 * (after[1][n] - before[1][n]) / wall, 2) for n in after[1]})


async def measure(o: Options, platform: Platform, store: Store, agents: Agents, pids: dict[str, int]) -> Result:
    sem, rng = asyncio.Semaphore(64), random.Random(1)

    async def register(k: int) -> None:
        async with sem:
            await agents.register(k)

    t0 = time.monotonic()
    await asyncio.gather(*(register(k) for k in range(o.nodes)))
    register_s = time.monotonic() - t0
    print(f"{o.nodes} nodes registered in {register_s:.1f} s; settling", file=sys.stderr, flush=True)
    tasks = [t for k in range(o.nodes) for t in agents.start(k, rng)]
    try:
        await asyncio.sleep(2 * o.reconcile_s)
        agents.calls.counting = True
        pass_s, passes = pass_metrics(platform)
        start = first = usage(pids)
        samples = []
        while (left := o.seconds - (time.monotonic() - first[0])) > 0.5:
            await asyncio.sleep(min(o.sample_s, left))
            now = usage(pids)
            samples.append(percent(now[0] - first[0], start, now))
            start = now
            print(f"  {samples[-1].at_s:.0f} s: " + ", ".join(f"{n} {v:.1f}%" for n, v in
                                                          samples[-1].cpu_percent.items()), file=sys.stderr)
        overall = percent(start[0] - first[0], first, start)
        agents.calls.counting = False
        pass_now, passes_now = pass_metrics(platform)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    n = passes_now - passes
    lost = await store.nodes.count_documents({"lost": True})
    return Result(register_s=round(register_s, 2), samples=samples, overall=overall, calls=agents.calls, passes=n,
                  pass_mean_ms=round(1000 * (pass_now - pass_s) / n, 1) if n else 0.0, lost=lost)


async def run(o: Options) -> Result:
    env = {"PAIQ_LOG_LEVEL": "info", "PAIQ_RECONCILE_SECONDS": str(o.reconcile_s),
           "PAIQ_NODE_TIMEOUT_SECONDS": str(o.node_timeout_s)}
    async with (separate_platform("nodes", o.mongo_uri, o.amqp_url, keep=o.keep, **env) as (platform, mongo_uri),
                contextlib.AsyncExitStack() as stack):
        store = await stack.enter_async_context(open_store(mongo_uri, Settings.from_env(platform.env).database))
        await only_simulated_nodes(platform, store)
        pids = {n: p for n, p in processes(platform, mongo_uri, o.amqp_url).items() if n != "launcher"}
        pids["bench"] = os.getpid()
        print("pids: " + ", ".join(f"{n} {p}" for n, p in pids.items()), file=sys.stderr, flush=True)
        connection = await aio_pika.connect_robust(o.amqp_url)
        stack.push_async_callback(connection.close)
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(platform.env["PAIQ_EXCHANGE"], ensure=False)
        prefix = platform.env["PAIQ_QUEUE_PREFIX"]
        bus = AmqpBus(connection, exchange, f"{prefix}.dead", prefetch=16)
        agents = Agents(store, channel, bus, exchange, prefix, o)
        return await measure(o, platform, store, agents, pids)


def table(o: Options, r: Result) -> str:
    names = list(r.overall.cpu_percent)
    head = ["at s", "over s", *(f"% {n}" for n in names)]
    rows = [[f"{s.at_s:.0f}", f"{s.seconds:.0f}", *(f"{s.cpu_percent[n]:.1f}" for n in names)] for s in r.samples]
    rows.append(["all", f"{r.overall.seconds:.0f}", *(f"{r.overall.cpu_percent[n]:.1f}" for n in names)])
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *rows]]
    hb, rc = r.calls.heartbeats, r.calls.reconciles
    lines += [
        f"{o.nodes:,} simulated nodes registered in {r.register_s:.1f} s; lost during the run: {r.lost}",
        f"heartbeats: {len(hb):,} ({len(hb) / r.overall.seconds:.0f}/s), ms p50/p99 {percentile(hb, 0.5):.1f} / "
        f"{percentile(hb, 0.99):.1f}; reconcile reads: {len(rc):,} ({len(rc) / r.overall.seconds:.0f}/s), ms p50/p99 "
        f"{percentile(rc, 0.5):.1f} / {percentile(rc, 0.99):.1f}; failed calls {r.calls.failures}",
        f"scheduler passes: {r.passes}, mean {r.pass_mean_ms:.0f} ms",
        "target: scheduler, status, SecantusDB each under 20% of a core",
        f"load average after the run (1 min): {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    o = parse(argv)
    r = asyncio.run(run(o))
    print(table(o, r))
    cpu = r.overall.cpu_percent
    hb, rc = r.calls.heartbeats, r.calls.reconciles
    print(json.dumps({
        "scheduler_cpu_percent": cpu.get("scheduler"), "status_cpu_percent": cpu.get("status"),
        "db_cpu_percent": cpu.get("secantusdb"), "bench_cpu_percent": cpu.get("bench"),
        "submit_cpu_percent": cpu.get("submit"), "rabbitmq_cpu_percent": cpu.get("rabbitmq"),
        "nodes": o.nodes, "seconds": r.overall.seconds, "register_s": r.register_s, "lost_nodes": r.lost,
        "heartbeats": len(hb), "heartbeat_ms_p50": round(percentile(hb, 0.5), 2),
        "heartbeat_ms_p99": round(percentile(hb, 0.99), 2),
        "reconcile_reads": len(rc), "reconcile_ms_p50": round(percentile(rc, 0.5), 2),
        "reconcile_ms_p99": round(percentile(rc, 0.99), 2), "failed_calls": r.calls.failures,
        "scheduler_passes": r.passes, "scheduler_pass_mean_ms": r.pass_mean_ms,
        "samples": [s.__dict__ for s in r.samples], "load_average": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }))
    return 0 if r.lost == 0 and r.calls.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
