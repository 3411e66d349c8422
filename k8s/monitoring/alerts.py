"""The alert rules: what each watches (``signal``, a query that returns data whenever paiq is scraped), when
it fires (``expr``, built on the signal), and what a tired operator should look at (``summary``,
``description``). The docs' "Alerts" section says the same per alert, with what to do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from shared.db.footprint import WARN_SHARE

# Every scrape job of paiq has "paiq" in its name: docker-compose's and the e2e's `paiq`, the Prometheus
# operator's `paiq-submit` (ServiceMonitor: the Service's name) and `paiq/paiq-ops` (PodMonitor).
PAIQ_TARGETS = 'job=~".*paiq.*"'
# A VC whose jobs waited this long at the 95th percentile (over 30 minutes) is starved: change it to suit.
QUEUE_WAIT_P95_SECONDS = 3600
# Image pulls failing on one node this many times in 15 minutes: more than one user's typo'd image.
PULL_FAILURES = 3

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True)
class Alert:
    name: str
    signal: str  # what is watched: returns a sample per series whenever the metric is scraped
    expr: str  # when it fires; contains ``signal``
    for_: str
    severity: Severity
    summary: str
    description: str

    def rule(self) -> dict[str, Any]:
        return {"alert": self.name, "expr": self.expr, "for": self.for_, "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "description": self.description}}


def _alert(name: str, signal: str, fires: str, for_: str, severity: Severity, summary: str, description: str) -> Alert:
    """An alert that fires while ``signal`` meets ``fires`` (a comparison: ``> 0``)."""
    return Alert(name, signal, f"{signal} {fires}", for_, severity, summary, description)


def _absent(name: str, signal: str, for_: str, severity: Severity, summary: str, description: str) -> Alert:
    """An alert that fires while ``signal`` (a count) is under 1, or has no data at all."""
    return Alert(name, signal, f"({signal} or vector(0)) < 1", for_, severity, summary, description)


def _down(name: str, signal: str, for_: str, severity: Severity, summary: str, description: str) -> Alert:
    """An alert that fires while a gauge of 1 (up) or 0 (down) is 0."""
    return _alert(name, signal, "== 0", for_, severity, summary, description)


def _counted(name: str, by: str, counter: str, fires: str, for_: str, severity: Severity, summary: str,
             description: str) -> Alert:
    """An alert on how much ``counter`` grew in the last 15 minutes, per ``by`` (a label)."""
    return _alert(name, f"sum by ({by}) (increase({counter}[15m]))", fires, for_, severity, summary, description)


CONTROL_PLANE = (
    _absent(
        "PaiqNoSchedulerLeading", 'sum(paiq_leading{service="scheduler"})', "1m", "critical",
        "No paiq scheduler leads: nothing new is placed",
        "No scheduler process holds the lease (or none is scraped): waiting jobs stay WAITING and freed "
        "resources are not handed on. Running jobs go on. Look at the scheduler processes (`kubectl -n paiq "
        "get pods -l app.kubernetes.io/component=scheduler`, `docker-compose ps scheduler`): are they "
        "running, and does their /healthz say `standby` with a database error? A scheduler that cannot "
        "reach MongoDB cannot hold the lease: see PaiqDatabaseUnreachable."),
    _down(
        "PaiqServiceDown", f"up{{{PAIQ_TARGETS}}}", "2m", "critical",
        "paiq's {{ $labels.instance }} ({{ $labels.job }}) cannot be scraped",
        "Prometheus gets no /metrics from {{ $labels.instance }} for 2 minutes: the process is down, "
        "restarting in a loop, or unreachable. Check its container or pod status and its last log lines "
        "(a process that stops by itself logs `fatal:` with the reason); a launcher that is down also "
        "leaves its node to be declared lost (PaiqNodeLost)."),
    _down(
        "PaiqServiceUnhealthy", "paiq_healthy", "2m", "warning",
        "paiq's {{ $labels.instance }} says it cannot do its work (/healthz 503)",
        "{{ $labels.instance }}'s /healthz has answered 503 for 2 minutes. `curl` its /healthz: `reason` "
        "names the first problem, `checks` the database and broker, `loops` each long-lived loop (failing "
        "since when, and why). The database or the broker away is the usual cause (their own alerts say "
        "so); a loop failing alone is in the process's log under `loop failing`."),
    _down(
        "PaiqDatabaseUnreachable", 'paiq_health_check_ok{check="database"}', "1m", "critical",
        "{{ $labels.instance }} cannot reach MongoDB",
        "The database check of {{ $labels.instance }} has failed for a minute (its /healthz `checks.database` "
        "says why). While MongoDB is away nothing is submitted, placed or recorded; work resumes by itself "
        "when it answers again. Check MongoDB (`kubectl -n paiq get pod mongodb-0`, `docker-compose ps "
        "mongodb`), its disk, and the PAIQ_MONGODB_URI the services use. If only some instances alert, "
        "suspect their network path to it."),
    _down(
        "PaiqBrokerUnreachable", 'paiq_health_check_ok{check="broker"}', "1m", "critical",
        "{{ $labels.instance }} cannot use RabbitMQ",
        "The broker check of {{ $labels.instance }} has failed for a minute: not connected, or a consuming "
        "channel closed (its /healthz `checks.broker` says which). Events wait; submit answers 503. Check "
        "RabbitMQ (`rabbitmq-diagnostics status`, its management UI, disk and memory alarms) and "
        "PAIQ_AMQP_URL."),
    _alert(
        "PaiqEmbeddedDatabaseOutgrowsCache",
        "max by (instance, storage) (paiq_embedded_db_stored_bytes / paiq_embedded_db_cache_bytes)",
        f"> {WARN_SHARE}", "30m", "warning",
        "paiq up's database on {{ $labels.instance }} holds {{ $value | humanizePercentage }} of its cache",
        "What `paiq up`'s embedded SecantusDB holds on disk has been over 70% of the cache it was given for 30 "
        "minutes. Past the cache every call stalls in cache eviction (seen at 71,000-81,000 jobs with 1 GB). "
        "Give it more before it fills (PAIQ_EMBEDDED_DB_CACHE, then restart paiq up), keep less history "
        "(PAIQ_JOB_RETENTION_DAYS), or move to a MongoDB replica set (PAIQ_MONGODB_URI; docs, Deploy)."),
    _counted(
        "PaiqMessagesDeadLettered", "queue", "paiq_messages_dead_lettered_total", "> 0", "0m", "warning",
        "Messages of {{ $labels.queue }} were dead-lettered",
        "Messages of the queue {{ $labels.queue }} went to the dead-letter exchange "
        "`paiq.dead` in the last 15 minutes: a handler failed 5 deliveries in a row, or the message was not "
        "a valid event. What it was for did not happen (a job may stay in its state until a reconcile "
        "catches up). The service's log has `message dead-lettered` with the error; the messages wait in "
        "the queue `paiq.dead` (RabbitMQ's management UI shows them) for you to read and, once fixed, "
        "move back."),
)

CLUSTER = (
    _alert(
        "PaiqNodeLost", "max by (node) (paiq_node_lost)", "== 1", "1m", "warning",
        "Node {{ $labels.node }} is lost",
        "The launcher of {{ $labels.node }} stopped sending heartbeats for the node timeout while the "
        "database answered: the scheduler declared the node lost, its tasks ended with -1001 (retried "
        "without using their retryCount) and its capacity left the cluster. Look at the node: the machine, "
        "its Docker engine, the launcher's container or pod and its log. The alert ends once the launcher "
        "registers again."),
    _alert(
        "PaiqNodesSilent", "max(paiq_nodes_silent)", "> 0", "5m", "warning",
        "{{ $value }} node(s) silent but not declared lost",
        "Launchers have not been heard from for the node timeout, and the scheduler spares them: the "
        "database answered it only recently, or too many nodes went silent together (more likely the "
        "database or the network than that many machines). The leading scheduler's log says why (`silent "
        "nodes are not declared lost`). Check the network between the nodes and MongoDB."),
    _alert(
        "PaiqQueueWaitHigh", "histogram_quantile(0.95, sum by (vc, le) (rate(paiq_queue_wait_seconds_bucket[30m])))",
        f"> {QUEUE_WAIT_P95_SECONDS}", "15m", "warning",
        "Jobs of VC {{ $labels.vc }} wait long for placement",
        "The 95th percentile of the time from queued to placed in VC {{ $labels.vc }} has been over "
        f"{QUEUE_WAIT_P95_SECONDS // 60} minutes for 15 minutes. `paiq queue {{{{ $labels.vc }}}}` shows the "
        "queue in order and why each job waits (quota, no node with enough free GPUs of the type, ports); "
        "`paiq vc list` the VC's quota, borrowed and lent. Raise its quota or borrowing, or free capacity."),
    _alert(
        "PaiqGpusIdle", "max by (node) (paiq_gpu_idle_tasks)", "> 0", "30m", "info",
        "{{ $value }} task(s) on {{ $labels.node }} hold GPUs they do not use",
        "Running tasks on {{ $labels.node }} were flagged for GPUs under PAIQ_GPU_IDLE_PERCENT utilisation "
        "for PAIQ_GPU_IDLE_SECONDS, and still are 30 minutes later. The launcher's log (`a task holds GPUs "
        "it does not use`) and the `task.gpu_idle` events name the jobs; their usage (`paiq status JOB`, "
        "the portal) shows the warning. Ask the owners, or stop the jobs if the cluster is short of GPUs."),
    _counted(
        "PaiqLaunchesFailing", "node", 'paiq_launch_failures_total{reason="image_pull"}', f">= {PULL_FAILURES}",
        "0m", "warning",
        "Image pulls keep failing on {{ $labels.node }}",
        "Tasks could not start on {{ $labels.node }} in 15 minutes because their image could "
        f"not be pulled (exit code 254). One user's misspelt image fails once per task; {PULL_FAILURES} or "
        "more usually means the registry is unreachable from the node, refuses its credentials, or the "
        "node's disk is full. The tasks' diagnostics (`paiq status JOB`) and the launcher's log (`task "
        "could not start`) quote the engine's error."),
)

NOTIFICATIONS = (
    _counted(
        "PaiqNotificationsFailing", "channel", 'paiq_notifications_total{outcome="failed"}', "> 0", "10m", "warning",
        "Notifications over {{ $labels.channel }} are failing",
        "The notify service could not deliver notifications over {{ $labels.channel }} in the "
        "last 15 minutes, and it has gone on for 10: users are not told their jobs ended. The notify "
        "service's log says why (the SMTP server or the webhook's answer); check the channel's settings "
        "and that the server is reachable from the service."),
)

GROUPS = {"paiq-control-plane": CONTROL_PLANE, "paiq-cluster": CLUSTER, "paiq-notifications": NOTIFICATIONS}
ALERTS = (*CONTROL_PLANE, *CLUSTER, *NOTIFICATIONS)


def rule_groups() -> list[dict[str, Any]]:
    return [{"name": name, "rules": [alert.rule() for alert in alerts]} for name, alerts in GROUPS.items()]


def rule_file() -> dict[str, Any]:
    """A Prometheus rule file (``rule_files:``; what promtool reads)."""
    return {"groups": rule_groups()}


def prometheus_rule() -> dict[str, Any]:
    """The same rules as the Prometheus operator's PrometheusRule object (labelled for a Prometheus whose
    ruleSelector picks ``app.kubernetes.io/part-of: paiq``)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "paiq-alerts", "labels": {"app.kubernetes.io/name": "paiq",
                                                       "app.kubernetes.io/component": "monitoring"}},
        "spec": {"groups": rule_groups()},
    }
