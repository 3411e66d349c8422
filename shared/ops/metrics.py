"""Prometheus metrics of every service, and the small ops server (``/healthz``, ``/metrics``) that the
scheduler, status and launcher processes run; submit serves both on its API port, and ``paiq up``
serves everything there from its one process."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

from shared.lifecycle import exitcodes
from shared.ops.listen import listen

if TYPE_CHECKING:
    from shared.ops.vitals import HealthReport

log = structlog.get_logger("paiq.metrics")

JOBS = Gauge("paiq_jobs", "Jobs by state and virtual cluster", ["state", "vc"])
QUEUE_LENGTH = Gauge("paiq_queue_length", "Jobs waiting for placement, per virtual cluster", ["vc"])
QUEUE_WAIT = Histogram("paiq_queue_wait_seconds", "Time from queued to placed, per virtual cluster", ["vc"],
                       buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600))
NODE_GPUS = Gauge("paiq_node_gpus", "GPUs per node: allocated or free", ["node", "kind"])
NODES_SILENT = Gauge("paiq_nodes_silent",
                     "Live nodes not heard from for the node timeout (lost, or spared while the database was "
                     "away or too many went silent together)")
VC_GPUS = Gauge("paiq_vc_gpus_allocated", "GPUs allocated to running tasks, per virtual cluster", ["vc"])
QUEUE_DECISION = Histogram("paiq_scheduler_decision_seconds",
                           "A scheduling pass's decision over the whole queue: ordering and placing every job, "
                           "no I/O (shared/queueing.plan_queue)",
                           buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1))
PREEMPTION_DECISION = Histogram("paiq_scheduler_preemption_seconds",
                                "A pass's preemption round: choosing victims for waiting jobs, no I/O "
                                "(shared/scheduling/preemption/rounds.py)",
                                buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1))
PREEMPTIONS = Counter("paiq_preemptions_total", "Jobs preempted, by the victim's virtual cluster and the "
                      "preempting job's", ["vc", "by_vc"])
VC_BORROWED = Gauge("paiq_vc_borrowed", "What a virtual cluster runs beyond its quota on others' idle capacity",
                    ["vc", "resource"])
VC_LENT = Gauge("paiq_vc_lent", "A virtual cluster's idle quota that other virtual clusters run on",
                ["vc", "resource"])
VC_QUOTA = Gauge("paiq_vc_quota", "A virtual cluster's quota: its percent of the live nodes' capacity, in units",
                 ["vc", "resource"])
SCHEDULER_PASS = Histogram("paiq_scheduler_pass_seconds", "A whole scheduling pass: reads, decision, writes",
                           buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
LAUNCH = Histogram("paiq_launch_seconds", "Time from a launch command to the task's container running",
                   buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
EVENTS_HANDLED = Counter("paiq_events_handled_total", "Events handled, by queue, type and outcome",
                         ["queue", "type", "outcome"])
# Profiling (the launcher's sampler): per node, and per virtual cluster for jobs' aggregates; never a job or
# task label, so the series stay as few as the nodes, their GPUs and the virtual clusters.
NODE_TASKS_SAMPLED = Gauge("paiq_node_tasks_sampled", "Running tasks whose usage the node's last round sampled",
                           ["node"])
NODE_CPU_USED = Gauge("paiq_node_cpu_used_cores", "CPU cores the node's tasks used (last samples, summed)", ["node"])
NODE_MEMORY_USED = Gauge("paiq_node_memory_used_bytes", "Memory the node's tasks use (last samples, summed)",
                         ["node"])
NODE_GPU_UTILIZATION = Gauge("paiq_node_gpu_utilization_percent", "Each GPU's utilisation (NVML)", ["node", "gpu"])
NODE_GPU_MEMORY = Gauge("paiq_node_gpu_memory_used_bytes", "Each GPU's memory in use (NVML)", ["node", "gpu"])
GPU_IDLE_TASKS = Gauge("paiq_gpu_idle_tasks", "Running tasks flagged for holding GPUs they do not use", ["node"])
GPU_IDLE_TOTAL = Counter("paiq_gpu_idle_total", "Idle-GPU stretches flagged (task.gpu_idle), per virtual cluster",
                         ["vc"])
TASK_GPU_UTILIZATION = Histogram("paiq_task_gpu_utilization_percent",
                                 "Tasks' GPU utilisation at each sample, per virtual cluster", ["vc"],
                                 buckets=(1, 5, 10, 25, 50, 75, 90, 100))
VC_GPU_SECONDS_HELD = Counter("paiq_vc_gpu_seconds_held_total", "GPU-seconds held by running tasks (sampled), per "
                              "virtual cluster", ["vc"])
VC_GPU_SECONDS_USED = Counter("paiq_vc_gpu_seconds_used_total", "GPU-seconds used (held x utilisation, where "
                              "measured), per virtual cluster", ["vc"])
SAMPLING_ROUND = Histogram("paiq_launcher_sampling_seconds", "A sampling round of the launcher: listing, reading "
                           "every running task's counters and the GPUs, storing",
                           buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30))
SAMPLES_SKIPPED = Counter("paiq_launcher_samples_skipped_total", "Running tasks a sampling round listed but got no "
                          "sample of: the container ended or went meanwhile, or the engine's stats for it were "
                          "refused, empty or unreadable (that sample is lost, never the round)", ["node"])
DEAD_LETTERED = Counter("paiq_messages_dead_lettered_total", "Messages sent to the dead-letter exchange", ["queue"])
NODE_LOST = Gauge("paiq_node_lost", "1 for a node declared lost (its launcher went silent; its tasks ended with -1001) "
                  "until its launcher registers again; exported by the leading scheduler", ["node"])
LAUNCH_FAILURES = Counter("paiq_launch_failures_total", "Tasks that could not start on the node, by why: image_pull "
                          "(exit 254), config (-1100: the job's config, plugins, storage), engine (the Docker engine "
                          "refused)", ["node", "reason"])
# Only a process running paiq up's embedded database exports these (labelled by its directory).
EMBEDDED_DB_STORED = Gauge("paiq_embedded_db_stored_bytes", "What paiq up's embedded database holds on disk (data, "
                           "indexes, its oplog and WiredTiger's journal; every minute): past its cache, calls stall "
                           "in eviction", ["storage"])
EMBEDDED_DB_CACHE = Gauge("paiq_embedded_db_cache_bytes", "The cache paiq up gave its embedded database", ["storage"])
# Read from the process's health report at every scrape (see record_health), as /healthz would answer now.
HEALTHY = Gauge("paiq_healthy", "1 while the process's /healthz answers 200, else 0")
HEALTH_CHECK = Gauge("paiq_health_check_ok", "1 while the dependency answers the process's /healthz check "
                     "(database: a ping; broker: connected, every consuming channel open), else 0", ["check"])
LEADING = Gauge("paiq_leading", "1 while this process's service holds its lease and does the work (the scheduler), "
                "0 while it stands by; only processes running such a service export it", ["service"])

Health = Callable[[], Awaitable["HealthReport"]]


# Why a task could not start, from the exit code the launcher gives it (shared/lifecycle/exitcodes.py).
LAUNCH_FAILURE_REASONS = {exitcodes.IMAGE_PULL_FAILED: "image_pull", exitcodes.CONFIG_ERROR: "config"}  # else: engine


def count_launch_failure(node: str, exit_code: int) -> None:
    """A task could not start on ``node`` (for the launcher's failed launches; PaiqLaunchesFailing reads it)."""
    LAUNCH_FAILURES.labels(node, LAUNCH_FAILURE_REASONS.get(exit_code, "engine")).inc()


def count_launch_failures_from_zero(node: str) -> None:
    """Export the node's launch failures at 0 from the launcher's start: ``increase()`` misses the first of a
    series that appears at 1."""
    for reason in (*LAUNCH_FAILURE_REASONS.values(), "engine"):
        LAUNCH_FAILURES.labels(node, reason)


def metrics_response() -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def record_health(report: HealthReport) -> None:
    """Put the health report in the gauges (scraped with them: alerts see what /healthz would answer)."""
    HEALTHY.set(1 if report.status == "ok" else 0)
    for check, result in report.checks.items():
        HEALTH_CHECK.labels(check).set(1 if result == "ok" else 0)
    for service, role in report.roles.items():
        LEADING.labels(service).set(1 if role == "leader" else 0)


async def health_metrics_response(health: Health) -> web.Response:
    """``/metrics`` with the health gauges as of now (the checks answer within vitals.CHECK_SECONDS)."""
    record_health(await health())
    return metrics_response()


def health_response(report: HealthReport) -> web.Response:
    """200 with the report while healthy, else 503 (a load balancer or Kubernetes probe reads the status)."""
    return web.json_response(report.model_dump(exclude_none=True), status=report.http_status)


def ops_app(health: Health, liveness: Callable[[], HealthReport]) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return health_response(await health())

    async def livez(_: web.Request) -> web.Response:
        return health_response(liveness())

    async def metrics(_: web.Request) -> web.Response:
        return await health_metrics_response(health)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    app.router.add_get("/metrics", metrics)
    return app


async def start_ops_server(stack: AsyncExitStack, host: str, port: int, health: Health,
                           liveness: Callable[[], HealthReport], service: str) -> None:
    runner = web.AppRunner(ops_app(health, liveness), access_log=None)
    await runner.setup()
    await listen(runner, host, port, serving=f"the {service} service's /healthz and /metrics",
                 port_setting=f"PAIQ_{service.upper()}_OPS_PORT", host_setting="PAIQ_OPS_HOST")
    stack.push_async_callback(runner.cleanup)
    log.info("ops endpoints listening", service=service, url=f"http://{host}:{port}/metrics")
