"""docs, Job profiling (Metrics): "No metric has a job or task label, so the number of series grows with
nodes, GPUs and VCs, never with jobs."

Every module of shared/ and services/ is imported and every Prometheus metric they define is read for its
label names: each must be bounded by the cluster's shape (nodes, GPUs, VCs) or by a fixed vocabulary
(states, kinds, event types, outcomes, resources, queues), never by jobs, tasks, users or containers.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest
from prometheus_client.metrics import MetricWrapperBase

import services
import shared

pytestmark = pytest.mark.unit

# Labels whose values are bounded by nodes, GPUs and VCs, or by a fixed vocabulary. A new label belongs
# here only if that holds for it too.
BOUNDED = {
    "node": "a node", "gpu": "a node's GPU index", "vc": "a virtual cluster", "by_vc": "a virtual cluster",
    "state": "a job state", "kind": "allocated or free", "resource": "gpus, cpus or memory_mb",
    "queue": "a service's queue", "type": "an event type",
    "outcome": "a handler's outcome; a notification try's (sent, retried, failed, held)",
    "check": "database or broker", "service": "a service with a lease (the scheduler)",
    "reason": "why a launch failed: image_pull, config or engine",
    "channel": "a notification's channel: email or webhook",
    "storage": "paiq up's database directory: one per process",
}
PER_JOB = ("job", "task", "attempt", "role", "index", "user", "container", "name", "id")


def every_module() -> list[ModuleType]:
    modules: list[ModuleType] = []
    for package in (shared, services):
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith("__main__"):
                continue  # a service's entry point runs it
            modules.append(importlib.import_module(info.name))
    return modules


def every_metric() -> dict[str, tuple[str, ...]]:
    found: dict[str, tuple[str, ...]] = {}
    for module in every_module():
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                found[value._name] = tuple(value._labelnames)
    return found


def test_no_metric_has_a_job_or_task_label() -> None:
    metrics = every_metric()
    assert len(metrics) >= 20 and "paiq_jobs" in metrics and "paiq_gpu_idle_tasks" in metrics, sorted(metrics)
    per_job = {name: [label for label in labels if any(word in label for word in PER_JOB)]
               for name, labels in metrics.items()}
    assert not {name: labels for name, labels in per_job.items() if labels}, "a label per job or task"
    unbounded = {name: [label for label in labels if label not in BOUNDED] for name, labels in metrics.items()}
    assert not {name: labels for name, labels in unbounded.items() if labels}, (
        "a label not known to be bounded by nodes, GPUs, VCs or a fixed vocabulary")
