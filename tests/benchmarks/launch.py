"""Launch latency: from a task's launch command to its container running, against the engine's own time.

    python tests/benchmarks/launch.py [--runs 20] [--tasks 1] [--bus rabbitmq|memory] [--image IMAGE] [--smoke]

Three ways of starting the same container (image, command, limits, environment), interleaved round by
round on the same engine:
- ``engine``: the Docker SDK's create + start of exactly what paiq asks the engine for (the engine's own
  time: what is left above it is paiq's);
- ``docker run``: the ``docker run -d`` command line with the same limits, what a user would type;
- ``paiq``: a ``node.<id>.launch`` command published on the bus to a running launcher (the real service:
  it looks the task up, claims its run in MongoDB, checks the image, creates and starts the container).
Each is timed from just before the action to the engine's own ``start`` event of the container (its
``timeNano``), so all three end at the same instant. With ``--tasks K`` every round starts K containers
at once (one launch command with K tasks; K concurrent creates; K concurrent ``docker run``).

It prints a table and, as its last line, one JSON object of the figures (milliseconds).
The image is tagged ``local/busybox:bench`` by default: a ``latest`` tag would add a registry refresh
to each paiq launch by policy (PAIQ_PULL_LATEST), which is not what is measured here. RabbitMQ is
--amqp-url, by default PAIQ_TEST_AMQP_URL (set by tests/run.sh) or the machine's broker.

``--smoke``: one warm-up and two measured rounds of two tasks, no pause (seconds: that the benchmark runs,
not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import docker  # noqa: E402

from services.launcher.container.spec import container_spec  # noqa: E402
from services.launcher.deps import LauncherDeps  # noqa: E402
from services.launcher.engine.docker_driver import DockerDriver, create_args  # noqa: E402
from services.launcher.reconcile import plan_of  # noqa: E402
from services.launcher.service import start_launcher  # noqa: E402
from shared.admission.validation import Accepted, validate_job_config  # noqa: E402
from shared.bus.base import Bus  # noqa: E402
from shared.db.embedded import embedded_mongo  # noqa: E402
from shared.db.logs import LogStore  # noqa: E402
from shared.db.store import Store, open_store  # noqa: E402
from shared.events import LaunchTasks, LaunchTasksData  # noqa: E402
from shared.ops.vitals import Vitals  # noqa: E402
from shared.records import JobRecord, SubState, TaskRecord, TaskSpec, now_ms  # noqa: E402
from shared.runtime.service import open_bus  # noqa: E402
from shared.settings.model import Settings  # noqa: E402
from shared.tasks.launchspec import container_name, task_specs  # noqa: E402

BENCH_IMAGE = "local/busybox:bench"
COMMAND = "sleep 60"
TARGET_MS = 100.0


class StartTimes:
    """The engine's ``create`` and ``start`` events, by container name (read in a thread of its own)."""

    def __init__(self, client: docker.DockerClient) -> None:
        self._stream = client.events(decode=True, filters={"type": "container", "event": ["create", "start"]})
        self._seen: dict[str, int] = {}
        self.created: dict[str, int] = {}
        self._lock = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for event in self._stream:
                name = str(((event.get("Actor") or {}).get("Attributes") or {}).get("name", ""))
                with self._lock:
                    seen = self._seen if event.get("status", event.get("Action")) == "start" else self.created
                    seen[name] = int(event["timeNano"])
                    self._lock.notify_all()
        except Exception:  # closed at the end
            return

    async def wait(self, name: str, limit_s: float = 30) -> int:
        def blocking() -> int:
            with self._lock:
                if not self._lock.wait_for(lambda: name in self._seen, limit_s):
                    raise TimeoutError(f"container {name} did not start within {limit_s}s")
                return self._seen[name]

        return await asyncio.to_thread(blocking)

    def close(self) -> None:
        self._stream.close()


def ms(t0_ns: int, t1_ns: int) -> float:
    return (t1_ns - t0_ns) / 1e6


async def timed(starts: StartTimes, t0: int, names: list[str]) -> list[tuple[float, float]]:
    """(to the engine's create event, to its start event) of each container, in ms from ``t0``."""
    return [(ms(t0, starts.created.get(n, t0)), ms(t0, start)) for n in names for start in [await starts.wait(n)]]


async def engine_round(client: docker.DockerClient, starts: StartTimes, spec: TaskSpec, names: list[str],
                       label: str, settings: Settings) -> list[tuple[float, float]]:
    def create_and_start(name: str) -> None:
        args = create_args(container_spec(spec, name=name, node_id=label, code_dir="", settings=settings.launcher))
        args["labels"] = {label: "1"}
        client.containers.create(spec.image, **args).start()

    t0 = time.time_ns()
    await asyncio.gather(*(asyncio.to_thread(create_and_start, n) for n in names))
    return await timed(starts, t0, names)


async def cli_round(starts: StartTimes, image: str, names: list[str], label: str) -> list[tuple[float, float]]:
    async def run(name: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            "docker", "run", "-d", "--name", name, "--network", "host", "--init", "--label", f"{label}=1",
            "--cpus", "1", "--memory", "128m", "--memory-swap", "128m", "--shm-size", "64m", "-w", "/pai",
            "--entrypoint", "/bin/sh", image, "-c", COMMAND, stdout=subprocess.DEVNULL)
        await proc.wait()

    t0 = time.time_ns()
    await asyncio.gather(*(run(n) for n in names))
    return await timed(starts, t0, names)


async def placed_job(store: Store, settings: Settings, image: str, tasks: int) -> tuple[JobRecord, LaunchTasks]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    result = validate_job_config({"jobName": name, "image": image, "taskRoles": [
        {"name": "main", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128, "command": COMMAND}]})
    assert isinstance(result, Accepted)
    job = JobRecord(id=f"bench~{name}", user="bench", name=name, virtual_cluster="default", config=result.config,
                    raw_config=result.raw, created_ms=now_ms(), sub_state=SubState.STARTING,
                    tasks=tuple(TaskRecord(role="main", index=i, node_id=settings.node.node_id, ip="127.0.0.1")
                                for i in range(tasks)))
    await store.insert_job(job)
    plan = plan_of(job)
    assert plan is not None
    launch = LaunchTasks(subject=job.id, data=LaunchTasksData(
        job_id=job.id, attempt=0, node_id=settings.node.node_id,
        tasks=tuple(task_specs(job, plan, settings.default_fs_uri))))
    return job, launch


async def paiq_round(bus: Bus, store: Store, settings: Settings, starts: StartTimes, image: str,
                     tasks: int) -> tuple[list[tuple[float, float]], list[str]]:
    job, launch = await placed_job(store, settings, image, tasks)
    names = [container_name(job.id, 0, "main", i) for i in range(tasks)]
    t0 = time.time_ns()
    await bus.publish([launch])
    return await timed(starts, t0, names), names


def remove(client: docker.DockerClient, names: Sequence[str]) -> None:
    for name in names:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(name, force=True)


@asynccontextmanager
async def launcher(settings: Settings, mongo_uri: str) -> AsyncIterator[tuple[Bus, Store]]:
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(mongo_uri, settings.database))
        bus = await stack.enter_async_context(open_bus(settings))
        driver = DockerDriver.from_url(settings.docker_url)
        stack.push_async_callback(driver.close)
        await start_launcher(stack, LauncherDeps(settings=settings, store=store, bus=bus, driver=driver,
                                                 logs=LogStore(store.jobs.database)), Vitals())
        yield bus, store


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": statistics.median(ordered), "p90": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))],
            "mean": statistics.fmean(ordered), "min": ordered[0], "max": ordered[-1]}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    client = docker.from_env()
    if args.image == BENCH_IMAGE:
        client.images.get("local/busybox:latest").tag(BENCH_IMAGE)
    client.images.get(args.image)  # must be on the node: pulls are not what is measured
    node = f"bench-{uuid.uuid4().hex[:6]}"
    label = f"paiq.bench.{node}"
    starts = StartTimes(client)
    results: dict[str, list[tuple[float, float]]] = {"engine": [], "docker run": [], "paiq": []}
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncExitStack() as stack:
            uri = args.mongodb_uri or await stack.enter_async_context(embedded_mongo(None))
            env = {"PAIQ_NODE_ID": node, "PAIQ_DATA_DIR": tmp, "PAIQ_MONGODB_URI": uri,
                   "PAIQ_MONGODB_DATABASE": f"bench_{node.replace('-', '_')}", "PAIQ_RECONCILE_SECONDS": "60",
                   "PAIQ_QUEUE_PREFIX": f"bench-{node}", "PAIQ_EXCHANGE": f"bench-{node}.events"}
            if args.bus == "rabbitmq":
                env["PAIQ_AMQP_URL"] = args.amqp_url
            settings = Settings.from_env(env)
            bus, store = await stack.enter_async_context(launcher(settings, uri))
            try:
                for round_no in range(args.warmup + args.runs):
                    names = [f"{node}-r{round_no}-{m}-{i}" for m in ("e", "c") for i in range(args.tasks)]
                    _, model = await placed_job(store, settings, args.image, 1)
                    engine = await engine_round(client, starts, model.data.tasks[0], names[:args.tasks], label,
                                                settings)
                    cli = await cli_round(starts, args.image, names[args.tasks:], label)
                    ours, paiq_names = await paiq_round(bus, store, settings, starts, args.image, args.tasks)
                    if round_no >= args.warmup:
                        results["engine"] += engine
                        results["docker run"] += cli
                        results["paiq"] += ours
                    await asyncio.to_thread(remove, client, [*names, *paiq_names])
                    await asyncio.sleep(args.pause)
            finally:
                for c in client.api.containers(all=True, filters={"label": f"paiq.node={node}"}):
                    remove(client, [c["Id"]])
                for c in client.api.containers(all=True, filters={"label": label}):
                    remove(client, [c["Id"]])
    starts.close()
    stats = {method: summary([running for _, running in values]) for method, values in results.items()}
    to_create = {method: statistics.median(created for created, _ in values) for method, values in results.items()}
    return {
        "runs": args.runs, "tasks_per_launch": args.tasks, "bus": args.bus, "image": args.image,
        "samples": len(results["paiq"]),
        **{f"{key}_{stat}_ms": round(value, 1) for method, key in (("engine", "engine"), ("docker run", "cli"),
                                                                  ("paiq", "paiq"))
           for stat, value in stats[method].items() if stat in ("p50", "p90", "mean")},
        **{f"{key}_to_create_p50_ms": round(to_create[method], 1)
           for method, key in (("engine", "engine"), ("docker run", "cli"), ("paiq", "paiq"))},
        "paiq_before_engine_p50_ms": round(to_create["paiq"] - to_create["engine"], 1),
        "overhead_p50_ms": round(stats["paiq"]["p50"] - stats["engine"]["p50"], 1),
        "overhead_vs_cli_p50_ms": round(stats["paiq"]["p50"] - stats["docker run"]["p50"], 1),
        "target_overhead_p50_ms": TARGET_MS,
        "within_target": stats["paiq"]["p50"] - stats["engine"]["p50"] < TARGET_MS,
    }


def table(figures: dict[str, Any]) -> str:
    rows = [f"launch -> container running, {figures['samples']} containers each "
            f"({figures['runs']} rounds x {figures['tasks_per_launch']} task(s), bus: {figures['bus']})",
            f"{'method':12} {'p50 ms':>8} {'p90 ms':>8} {'mean ms':>8}   {'to create p50 ms':>16}"]
    for method, key in (("engine", "engine"), ("docker run", "cli"), ("paiq", "paiq")):
        rows.append(f"{method:12} {figures[f'{key}_p50_ms']:>8.1f} {figures[f'{key}_p90_ms']:>8.1f} "
                    f"{figures[f'{key}_mean_ms']:>8.1f}   {figures[f'{key}_to_create_p50_ms']:>16.1f}")
    rows.append(f"paiq overhead beyond the engine (p50): {figures['overhead_p50_ms']:.1f} ms "
                f"(target < {figures['target_overhead_p50_ms']:.0f} ms: "
                f"{'met' if figures['within_target'] else 'NOT met'}); "
                f"against docker run: {figures['overhead_vs_cli_p50_ms']:+.1f} ms\n"
                f"paiq's own work before the engine creates the container (p50): "
                f"{figures['paiq_before_engine_p50_ms']:.1f} ms")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="measured rounds (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="rounds run first and not counted (default 2)")
    p.add_argument("--tasks", type=int, default=1, help="containers per round and per launch command (default 1)")
    p.add_argument("--bus", choices=["rabbitmq", "memory"], default="rabbitmq")
    p.add_argument("--amqp-url", default=os.environ.get("PAIQ_TEST_AMQP_URL", "amqp://paiq:PASSWORD@127.0.0.1:5672/"))
    p.add_argument("--mongodb-uri", help="default: a private in-memory SecantusDB")
    p.add_argument("--image", default=BENCH_IMAGE)
    p.add_argument("--pause", type=float, default=0.3, help="seconds between rounds (default 0.3)")
    p.add_argument("--smoke", action="store_true", help="a small run: 1 warm-up and 2 measured rounds of 2 tasks")
    args = p.parse_args(argv)
    if args.smoke:
        args.runs, args.warmup, args.tasks, args.pause = 2, 1, 2, 0.0
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    figures = asyncio.run(bench(args))
    print(table(figures))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
