"""Benchmark: one big job from its POST to every task's launch command, through the real RabbitMQ.

    .venv/bin/python tests/benchmarks/bigjob.py [--sizes 250,500,1000,2000,4000] [--mongo-uri URI] [--keep]
        [--profile FILE] [--smoke]

Starts a private in-memory SecantusDB (or uses --mongo-uri) and the four services as separate processes
over RabbitMQ, as tests/infra.py's ``start_platform("separate", ...)`` does; the launcher's node declares
a capacity large enough for every job (100,000 CPUs, ports 20000-60000). A queue of the benchmark's own,
bound on the run's exchange to ``node.*.launch`` and ``job.scheduled``, sees every launch command. Once a
warm-up job's launch has arrived (the node registered, the services warm), the launcher is paused
(SIGSTOP; killed at the end, so none of the tasks ever starts): the figure is the control plane's.

For each size, in order, one job of that many tasks (one port each, ``true`` on local/busybox:latest) is
POSTed and timed from the start of its POST until launch commands for all of its tasks were published
(counted across messages), with the bytes of those messages and the scheduler's CPU seconds meanwhile.
Earlier jobs stay placed (nothing runs them), as in a busy cluster.

Prints a table, then, as its last line, one JSON object: ``seconds_at_2000``, ``growth_exponent`` (the
least-squares slope of log seconds over log tasks), ``bytes_per_task_at_2000`` and every size's figures.

``--smoke``: jobs of 10 and 20 tasks, and the refused one (seconds: that the benchmark runs, not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aio_pika

from services.cli.client import ApiCallError, PaiqClient, paiq_client
from tests.benchmarks.figures import exponent
from tests.benchmarks.platform_run import separate_platform
from tests.benchmarks.submit_to_scheduled import cpu_seconds, processes
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, unique

IMAGE = "local/busybox:latest"


@dataclass(frozen=True)
class Options:
    sizes: tuple[int, ...]
    amqp_url: str
    mongo_uri: str | None
    timeout_s: float
    keep: bool
    profile: str | None


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="250,500,1000,2000,4000", help="tasks per job, comma-separated")
    p.add_argument("--amqp-url", default=os.environ.get("PAIQ_TEST_AMQP_URL", "amqp://paiq:PASSWORD@127.0.0.1:5672/"))
    p.add_argument("--mongo-uri", default=os.environ.get("PAIQ_TEST_MONGODB_URI"),
                   help="default: a private in-memory SecantusDB")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one job's launches")
    p.add_argument("--keep", action="store_true", help="keep the work directory (service logs)")
    p.add_argument("--profile", metavar="FILE",
                   help="record the scheduler with py-spy during the measured jobs (raw, collapsed stacks)")
    p.add_argument("--smoke", action="store_true", help="a small run: jobs of 10 and 20 tasks")
    a = p.parse_args(argv)
    if a.smoke:
        a.sizes = "10,20"
    sizes = tuple(int(s) for s in a.sizes.split(",") if s.strip())
    return Options(sizes=sizes, amqp_url=a.amqp_url, mongo_uri=a.mongo_uri, timeout_s=a.timeout, keep=a.keep,
                   profile=a.profile)


def job_config(name: str, tasks: int) -> bytes:
    return json.dumps({"jobName": name, "image": IMAGE, "taskRoles": [
        {"name": "worker", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 100, "command": "true",
         "portList": [{"label": "http", "beginAt": 0, "portNumber": 1}]}]}).encode()


# --- what the broker carried ---------------------------------------------------------------------


@dataclass
class Seen:
    """One job's launch commands as they arrived on the benchmark's queue."""

    tasks: int = 0
    messages: int = 0
    bytes: int = 0
    scheduled_at: float | None = None
    last_launch_at: float | None = None


@dataclass
class Watch:
    jobs: dict[str, Seen] = field(default_factory=dict)  # by job name
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_message(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        arrived = time.monotonic()
        async with message.process():
            event = json.loads(message.body)
            seen = self.jobs.setdefault(str(event.get("subject", "")).split("~")[1], Seen())
            if event["type"] == "job.scheduled":
                seen.scheduled_at = arrived
            else:
                seen.tasks += len(event["data"]["tasks"])
                seen.messages += 1
                seen.bytes += len(message.body)
                seen.last_launch_at = arrived
            self.changed.set()

    async def launched(self, name: str, tasks: int, timeout_s: float) -> Seen:
        deadline = time.monotonic() + timeout_s
        while self.jobs.get(name, Seen()).tasks < tasks:
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{name}: {self.jobs.get(name, Seen()).tasks} of {tasks} tasks launched")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        return self.jobs[name]


@contextlib.asynccontextmanager
async def watching(amqp_url: str, exchange: str) -> AsyncIterator[Watch]:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=16)
        ex = await channel.get_exchange(exchange)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        for key in ("node.*.launch", "job.scheduled"):
            await queue.bind(ex, key)
        watch = Watch()
        await queue.consume(watch.on_message)
        yield watch


# --- the run ------------------------------------------------------------------------------------


@dataclass
class Size:
    tasks: int
    post_ms: float
    scheduled_s: float
    launched_s: float
    messages: int
    mb: float
    bytes_per_task: int
    cpu_s: dict[str, float]


async def login(platform: Platform, anonymous: PaiqClient) -> tuple[PaiqClient, str]:
    admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
    user = unique("bench")
    await admin.put_user(user, "bench-pass")
    return anonymous.with_token((await anonymous.login(user, "bench-pass"))["token"]), user


async def one_job(client: PaiqClient, user: str, watch: Watch, pids: dict[str, int], tasks: int,
                  timeout_s: float) -> Size:
    name = f"big{tasks}-{unique('j')}"
    cpu_before = {n: cpu_seconds(pid) for n, pid in pids.items()}
    t0 = time.monotonic()
    await client.submit(user, job_config(name, tasks))
    post_ms = (time.monotonic() - t0) * 1000
    seen = await watch.launched(name, tasks, timeout_s)
    end = seen.last_launch_at or time.monotonic()
    cpu = {n: round(cpu_seconds(pid) - cpu_before[n], 2) for n, pid in pids.items()}
    return Size(tasks=tasks, post_ms=round(post_ms, 1),
                scheduled_s=round((seen.scheduled_at or end) - t0, 3), launched_s=round(end - t0, 3),
                messages=seen.messages, mb=round(seen.bytes / 1e6, 2), bytes_per_task=round(seen.bytes / tasks),
                cpu_s=cpu)


async def measure(o: Options, platform: Platform, mongo_uri: str) -> list[Size]:
    launcher = next(p for p in platform.procs if "services.launcher" in str(p.args))
    async with paiq_client(platform.api) as anonymous, watching(o.amqp_url, platform.env["PAIQ_EXCHANGE"]) as watch:
        client, user = await login(platform, anonymous)
        await client.submit(user, job_config("warmup", 1))
        await watch.launched("warmup", 1, 120)
        launcher.send_signal(signal.SIGSTOP)  # no task of the measured jobs ever starts
        pids = {n: p for n, p in processes(platform, mongo_uri, o.amqp_url).items() if n != "launcher"}
        results = []
        with profiling(o.profile, pids["scheduler"]):
            for tasks in o.sizes:
                results.append(await one_job(client, user, watch, pids, tasks, o.timeout_s))
                print(f"  {tasks} tasks: {results[-1].launched_s:.2f} s", file=sys.stderr)
        print(f"a role of {REFUSED:,} tasks: {await refusal(client, user)}", file=sys.stderr)
        return results


@contextlib.contextmanager
def profiling(out: str | None, pid: int) -> Iterator[None]:
    """py-spy recording ``pid`` meanwhile (when asked), its stacks written to ``out`` at the end."""
    if out is None:
        yield
        return
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(pid), "-o", out,
                            "-f", "raw", "-r", "250", "--nonblocking"], stdout=subprocess.DEVNULL)
    time.sleep(1)  # attached before the first POST
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)


REFUSED = 6000  # one host list over Linux's 128 KiB a variable


async def refusal(client: PaiqClient, user: str) -> str:
    """What submit answers to a job whose environment would not fit (it must refuse it)."""
    try:
        await client.submit(user, job_config("too-big", REFUSED))
    except ApiCallError as e:
        return f"{e.status} {e.code}: {e.message}"
    raise RuntimeError(f"a job of {REFUSED} tasks in one role was accepted")


async def run(o: Options) -> list[Size]:
    env = {"PAIQ_NODE_CPUS": "100000", "PAIQ_NODE_MEMORY_MB": str(100000 * 1024), "PAIQ_NODE_PORT_RANGE": "20000-60000",
           "PAIQ_LOG_LEVEL": "info", "PAIQ_NODE_TIMEOUT_SECONDS": "3600"}
    async with separate_platform("bigjob", o.mongo_uri, o.amqp_url, keep=o.keep, **env) as (platform, uri):
        return await measure(o, platform, uri)


def growth_exponent(sizes: list[Size]) -> float:
    """The slope of log(seconds) over log(tasks): 1 is linear, 2 quadratic."""
    return exponent([s.tasks for s in sizes], [s.launched_s for s in sizes])


def table(sizes: list[Size]) -> str:
    names = sorted({n for s in sizes for n in s.cpu_s}, key=lambda n: -sum(s.cpu_s.get(n, 0) for s in sizes))
    head = ["tasks", "POST ms", "scheduled s", "launched s", "messages", "MB", "bytes/task",
            *(f"CPU s {n}" for n in names)]
    rows = [[f"{s.tasks:,}", f"{s.post_ms:.0f}", f"{s.scheduled_s:.2f}", f"{s.launched_s:.2f}", str(s.messages),
             f"{s.mb:.2f}", f"{s.bytes_per_task:,}", *(f"{s.cpu_s.get(n, 0):.2f}" for n in names)] for s in sizes]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows])


def main(argv: list[str] | None = None) -> None:
    o = parse(argv)
    sizes = asyncio.run(run(o))
    print(table(sizes))
    print(f"load average after the run (1 min): {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    at = {s.tasks: s for s in sizes}
    print(json.dumps({
        "seconds_at_2000": at[2000].launched_s if 2000 in at else None,
        "growth_exponent": round(growth_exponent(sizes), 3),
        "bytes_per_task_at_2000": at[2000].bytes_per_task if 2000 in at else None,
        "sizes": [asdict(s) for s in sizes],
    }))


if __name__ == "__main__":
    main()
