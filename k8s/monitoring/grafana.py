"""The Grafana dashboards: the cluster, a virtual cluster, and the platform's own health.

Every query reads paiq's own metrics (shared/ops/metrics.py). The scheduler's gauges come from the
leading scheduler alone (a standby exports none), and are read through ``max by`` so that a failover's
overlap never counts a value twice. GPU utilisation needs NVML on the nodes (docs, Job profiling);
without it those panels stay empty and the rest works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common, prometheus, stat, text, timeseries
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import text as text_model

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


def _targets(queries: tuple[Query, ...]) -> list[prometheus.Dataquery]:
    return [prometheus.Dataquery().expr(q.expr).legend_format(q.legend or "__auto").ref_id(chr(ord("A") + i))
            for i, q in enumerate(queries)]


def graph(title: str, description: str, *queries: Query, unit: str = "short", width: int = 12,
          stacked: bool = False) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description).datasource(DATASOURCE)
             .targets(list(_targets(queries))).unit(unit).span(width).height(8).fill_opacity(10)
             .legend(common.VizLegendOptions().show_legend(True).display_mode(common_model.LegendDisplayMode.LIST)
                     .placement(common_model.LegendPlacement.BOTTOM))
             .tooltip(common.VizTooltipOptions().mode(common_model.TooltipDisplayMode.MULTI)))
    if stacked:
        panel = panel.stacking(common.StackingConfig().mode(common_model.StackingMode.NORMAL))
    return panel


def number(title: str, description: str, *queries: Query, unit: str = "short", width: int = 6) -> stat.Panel:
    return (stat.Panel().title(title).description(description).datasource(DATASOURCE)
            .targets(list(_targets(queries))).unit(unit).span(width).height(4)
            .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"])))


def note(title: str, markdown: str, width: int = 24) -> text.Panel:
    return text.Panel().title(title).content(markdown).mode(text_model.TextMode.MARKDOWN).span(width).height(4)


def _quantiles(metric: str, by: str, title: str, description: str, selector: str = "") -> timeseries.Panel:
    grouped = f"sum by ({by}le) (rate({metric}_bucket{selector}[{RATE}]))"
    legend = "".join(f"{{{{{label.strip()}}}}} " for label in by.split(",") if label.strip())
    return graph(title, description,
                 Query(f"histogram_quantile(0.5, {grouped})", f"{legend}p50"),
                 Query(f"histogram_quantile(0.95, {grouped})", f"{legend}p95"), unit="s")


def _base(uid: str, title: str, description: str) -> db.Dashboard:
    return (db.Dashboard(title).uid(uid).description(description).tags(["paiq"]).refresh("30s")
            .time("now-6h", "now").timezone("browser")
            .with_variable(db.DatasourceVariable("datasource").label("Prometheus").type("prometheus")))


def cluster() -> db.Dashboard:
    return (
        _base("paiq-cluster", "paiq / Cluster", "GPUs, queues, the scheduler, launches and nodes of the whole cluster")
        .with_row(db.Row("GPUs"))
        .with_panel(number("GPUs allocated", "GPUs held by running tasks, all nodes",
                           Query('sum(max by (node) (paiq_node_gpus{kind="allocated"}))')))
        .with_panel(number("GPUs free", "GPUs of live nodes that no task holds",
                           Query('sum(max by (node) (paiq_node_gpus{kind="free"}))')))
        .with_panel(number("GPUs in use (NVML)", "Mean utilisation of every GPU the launchers read",
                           Query("avg(paiq_node_gpu_utilization_percent)"), unit="percent"))
        .with_panel(number("Tasks holding idle GPUs", "Running tasks flagged for GPUs they do not use",
                           Query("sum(max by (node) (paiq_gpu_idle_tasks))")))
        .with_panel(graph("GPUs allocated per VC", "GPUs held by each virtual cluster's running tasks",
                          Query("max by (vc) (paiq_vc_gpus_allocated)", "{{vc}}"), stacked=True))
        .with_panel(graph("GPUs per node", "Allocated and free GPUs of each live node",
                          Query("max by (node, kind) (paiq_node_gpus)", "{{node}} {{kind}}")))
        .with_panel(graph("GPU utilisation per node (NVML)", "Each GPU's utilisation, as the launcher reads it",
                          Query("max by (node, gpu) (paiq_node_gpu_utilization_percent)", "{{node}} GPU {{gpu}}"),
                          unit="percent"))
        .with_panel(graph("GPUs held and used per VC", "GPU-seconds per second: held by running tasks (sampled), "
                          "and used (held x utilisation, where NVML measures it)",
                          Query(f"sum by (vc) (rate(paiq_vc_gpu_seconds_held_total[{RATE}]))", "{{vc}} held"),
                          Query(f"sum by (vc) (rate(paiq_vc_gpu_seconds_used_total[{RATE}]))", "{{vc}} used")))
        .with_row(db.Row("Queues"))
        .with_panel(graph("Jobs waiting per VC", "Jobs queued for placement, parked ones included",
                          Query("max by (vc) (paiq_queue_length)", "{{vc}}"), stacked=True))
        .with_panel(_quantiles("paiq_queue_wait_seconds", "vc, ", "Queue wait per VC",
                               "Time from queued to placed, for the jobs placed lately"))
        .with_panel(graph("Jobs by state", "Jobs per state, all virtual clusters",
                          Query("sum by (state) (max by (state, vc) (paiq_jobs))", "{{state}}"), width=24))
        .with_row(db.Row("Scheduler"))
        .with_panel(_quantiles("paiq_scheduler_pass_seconds", "", "Scheduling pass",
                               "A whole pass: reads, the decision and the writes"))
        .with_panel(_quantiles("paiq_scheduler_decision_seconds", "", "Scheduling decision",
                               "A pass's pure decision over the whole queue (no I/O)"))
        .with_row(db.Row("Launches"))
        .with_panel(graph("Launches", "Tasks started per second, and tasks that could not start, by why",
                          Query(f"sum(rate(paiq_launch_seconds_count[{RATE}]))", "started"),
                          Query(f"sum by (reason) (rate(paiq_launch_failures_total[{RATE}]))", "failed: {{reason}}"),
                          unit="ops"))
        .with_panel(_quantiles("paiq_launch_seconds", "", "Launch latency",
                               "From a launch command to the task's container running (pulls included)"))
        .with_row(db.Row("Nodes"))
        .with_panel(graph("Nodes lost and silent", "Nodes declared lost (until their launcher registers again), "
                          "and live nodes silent for the node timeout",
                          Query("sum(max by (node) (paiq_node_lost))", "lost"),
                          Query("max(paiq_nodes_silent)", "silent")))
        .with_panel(graph("Tasks sampled per node", "Running tasks whose usage the node's last round sampled",
                          Query("max by (node) (paiq_node_tasks_sampled)", "{{node}}")))
        .with_panel(graph("CPU used per node", "CPU cores the node's tasks used (last samples, summed)",
                          Query("max by (node) (paiq_node_cpu_used_cores)", "{{node}}")))
        .with_panel(graph("Memory used per node", "Memory the node's tasks use (last samples, summed)",
                          Query("max by (node) (paiq_node_memory_used_bytes)", "{{node}}"), unit="bytes"))
    )


def virtual_cluster() -> db.Dashboard:
    vc = '{vc=~"$vc"}'
    return (
        _base("paiq-vc", "paiq / Virtual cluster", "One virtual cluster: its quota, what it borrows and lends, "
              "its queue and its GPU use")
        .with_variable(db.QueryVariable("vc").label("VC").datasource(DATASOURCE)
                       .query("label_values(paiq_vc_quota, vc)").refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
                       .multi(True).include_all(True))
        .with_panel(number("GPU quota", "The VC's quota: its percent of the live nodes' GPUs",
                           Query('sum(max by (vc) (paiq_vc_quota{vc=~"$vc", resource="gpus"}))')))
        .with_panel(number("GPUs allocated", "GPUs its running tasks hold",
                           Query(f"sum(max by (vc) (paiq_vc_gpus_allocated{vc}))")))
        .with_panel(number("GPUs borrowed", "GPUs it runs beyond its quota on others' idle quota",
                           Query('sum(max by (vc) (paiq_vc_borrowed{vc=~"$vc", resource="gpus"}))')))
        .with_panel(number("GPUs lent", "Its idle quota that other VCs run on",
                           Query('sum(max by (vc) (paiq_vc_lent{vc=~"$vc", resource="gpus"}))')))
        .with_panel(graph("Quota, borrowed and lent", "Per resource (gpus, cpus, memory_mb)",
                          Query(f"max by (vc, resource) (paiq_vc_quota{vc})", "{{vc}} quota {{resource}}"),
                          Query(f"max by (vc, resource) (paiq_vc_borrowed{vc})", "{{vc}} borrowed {{resource}}"),
                          Query(f"max by (vc, resource) (paiq_vc_lent{vc})", "{{vc}} lent {{resource}}")))
        .with_panel(graph("Jobs by state", "The VC's jobs per state",
                          Query(f"sum by (state) (max by (state, vc) (paiq_jobs{vc}))", "{{state}}")))
        .with_panel(graph("Jobs waiting", "Jobs queued for placement, parked ones included",
                          Query(f"max by (vc) (paiq_queue_length{vc})", "{{vc}}")))
        .with_panel(_quantiles("paiq_queue_wait_seconds", "vc, ", "Queue wait",
                               "Time from queued to placed, for the jobs placed lately", selector=vc))
        .with_panel(graph("GPU-hours held and used", "Over the dashboard's time range: GPU-hours its tasks held "
                          "(sampled) and used (held x utilisation, where NVML measures it)",
                          Query(f"sum by (vc) (increase(paiq_vc_gpu_seconds_held_total{vc}[$__range])) / 3600",
                                "{{vc}} held"),
                          Query(f"sum by (vc) (increase(paiq_vc_gpu_seconds_used_total{vc}[$__range])) / 3600",
                                "{{vc}} used")))
        .with_panel(graph("Tasks' GPU utilisation (NVML)", "The median and the 10th percentile of its tasks' GPU "
                          "utilisation samples",
                          Query("histogram_quantile(0.5, sum by (vc, le) "
                                f"(rate(paiq_task_gpu_utilization_percent_bucket{vc}[{RATE}])))", "{{vc}} p50"),
                          Query("histogram_quantile(0.1, sum by (vc, le) "
                                f"(rate(paiq_task_gpu_utilization_percent_bucket{vc}[{RATE}])))", "{{vc}} p10"),
                          unit="percent"))
        .with_panel(note("Its users", "Prometheus has no per-user figures: paiq's metrics are labelled by nodes, "
                         "GPUs and virtual clusters only, so that their series never grow with users or jobs. A "
                         "VC's use per user and per day is in paiq's usage reports; `paiq vc list` and "
                         "`paiq queue $vc` show its quota and its queue now."))
    )


def platform() -> db.Dashboard:
    targets = 'job=~".*paiq.*"'
    return (
        _base("paiq-platform", "paiq / Platform health", "paiq's own processes: health, the database and broker "
              "checks, the scheduler's lease, event handlers and dead letters")
        .with_panel(graph("Healthy", "1 while a process's /healthz answers 200",
                          Query("min by (instance) (paiq_healthy)", "{{instance}}"), width=8))
        .with_panel(graph("Database and broker checks", "1 while the dependency answers the process's check",
                          Query("min by (instance, check) (paiq_health_check_ok)", "{{instance}} {{check}}"), width=8))
        .with_panel(graph("Scheduler leading", "1 for the scheduler that holds the lease, 0 for a standby",
                          Query('max by (instance) (paiq_leading{service="scheduler"})', "{{instance}}"), width=8))
        .with_panel(graph("Scraped", "1 while Prometheus gets the process's /metrics",
                          Query(f"up{{{targets}}}", "{{instance}}"), width=8))
        .with_panel(graph("Events handled", "Per queue and outcome (failed: the message goes back, and is "
                          "dead-lettered after 5 deliveries)",
                          Query(f"sum by (queue, outcome) (rate(paiq_events_handled_total[{RATE}]))",
                                "{{queue}} {{outcome}}"), unit="ops", width=8))
        .with_panel(graph("Dead-lettered", "Messages sent to the dead-letter exchange paiq.dead, per queue",
                          Query(f"sum by (queue) (increase(paiq_messages_dead_lettered_total[{RATE}]))", "{{queue}}"),
                          width=8))
        .with_panel(graph("Events handled per type", "Per event type and outcome",
                          Query(f"sum by (type, outcome) (rate(paiq_events_handled_total[{RATE}]))",
                                "{{type}} {{outcome}}"), unit="ops"))
        .with_panel(graph("Notifications", "Deliveries of the notify service, per channel and outcome",
                          Query(f"sum by (channel, outcome) (rate(paiq_notifications_total[{RATE}]))",
                                "{{channel}} {{outcome}}"), unit="ops"))
        .with_panel(graph("Resident memory", "Per process",
                          Query(f"process_resident_memory_bytes{{{targets}}}", "{{instance}}"), unit="bytes"))
        .with_panel(graph("CPU", "Cores used per process",
                          Query(f"rate(process_cpu_seconds_total{{{targets}}}[{RATE}])", "{{instance}}")))
    )


DASHBOARDS = {"paiq-cluster": cluster, "paiq-vc": virtual_cluster, "paiq-platform": platform}


def dashboard_json(name: str) -> str:
    built = DASHBOARDS[name]().build()
    return json.dumps(json.loads(JSONEncoder().encode(built)), indent=2, sort_keys=True) + "\n"
