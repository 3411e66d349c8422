"""``paiq usage [--vc V] [--user U] [--from DAY --to DAY] [--by-vc] [--csv]``: GPU-hours held and used, CPU
core-hours and jobs per UTC day, virtual cluster and user, from ``GET /api/v1/usage``."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from services.cli.client import paiq_client
from services.cli.options import api_of, print_answer, token_of
from shared.usage.report import ReportRow, csv_text, totals


def report_rows(answer: Mapping[str, Any]) -> list[ReportRow]:
    """The answer's rows as the report's values (what the CSV and the table are written from)."""
    return [ReportRow(day=r["day"], vc=r["virtualCluster"], user=r["user"], gpu_hours_held=r["gpuHoursHeld"],
                      gpu_hours_used=r["gpuHoursUsed"], gpu_hours_measured=r["gpuHoursMeasured"],
                      gpu_utilization=r["gpuUtilization"], cpu_core_hours_held=r["cpuCoreHoursHeld"],
                      cpu_core_hours_used=r["cpuCoreHoursUsed"], jobs=r["jobs"], attempts=r["attempts"])
            for r in answer["rows"]]


def _util(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def usage_table(first: str, last: str, rows: Sequence[ReportRow]) -> list[str]:
    """Each row, then each VC's total over the days (UTIL%: GPU utilisation of the measured hours; '-' where
    none was measured)."""
    lines = [f"{'DAY':10}  {'VC':16} {'USER':16} {'GPU-H HELD':>10} {'GPU-H USED':>10} {'UTIL%':>5} "
             f"{'CORE-H HELD':>11} {'CORE-H USED':>11} {'JOBS':>5}"]
    for r in rows:
        lines.append(f"{r.day:10}  {r.vc:16} {r.user or '*':16} {r.gpu_hours_held:10.2f} {r.gpu_hours_used:10.2f} "
                     f"{_util(r.gpu_utilization):>5} {r.cpu_core_hours_held:11.2f} {r.cpu_core_hours_used:11.2f} "
                     f"{r.jobs:5d}")
    if not rows:
        lines.append("(no usage in these days: jobs are counted when they end)")
    for vc, a in sorted(totals(rows).items()):
        util = f", {100 * a.gpu_used_s / a.gpu_measured_s:.0f}% of the measured" if a.gpu_measured_s > 0 else ""
        lines.append(f"{vc} {first}..{last}: {a.gpu_held_s / 3600:.2f} GPU-hours held, {a.gpu_used_s / 3600:.2f} "
                     f"used{util}; {a.cpu_held_s / 3600:.2f} core-hours held; {a.jobs} jobs, {a.attempts} attempts")
    return lines


def usage_query(args: argparse.Namespace) -> dict[str, str]:
    given = {"from": args.first, "to": args.last, "vc": args.vc, "user": args.usage_user,
             "by": "vc" if args.by_vc else None}
    return {k: str(v) for k, v in given.items() if v}


async def _usage_lines(args: argparse.Namespace) -> list[str]:
    async with paiq_client(api_of(args), token_of(args)) as client:
        answer = await client.usage(usage_query(args))
    rows = report_rows(answer)
    if args.csv:
        return csv_text(rows).removesuffix("\n").split("\n")  # each line printed as it stands in the CSV
    return usage_table(answer["from"], answer["to"], rows)


async def cmd_usage(args: argparse.Namespace) -> int:
    """Prints the report (``--csv``: as CSV); the API's refusal (a wrong day, rows one may not see) exits 1."""
    return await print_answer(_usage_lines(args), refusal_prefix="paiq usage")


def add_usage_parser(sub: Any) -> None:
    us = sub.add_parser("usage", help="GPU-hours held and used, CPU core-hours and jobs per UTC day, virtual cluster "
                                      "and user (yours and your VCs'; an admin's: everyone's)")
    us.add_argument("--vc", help="only this virtual cluster")
    us.add_argument("--user", dest="usage_user", metavar="U", help="only this user's rows")
    us.add_argument("--from", dest="first", metavar="YYYY-MM-DD", help="the first UTC day (default: 29 days before "
                                                                       "--to)")
    us.add_argument("--to", dest="last", metavar="YYYY-MM-DD", help="the last UTC day (default: today)")
    us.add_argument("--by-vc", action="store_true", help="one row per VC and day, every user summed")
    us.add_argument("--csv", action="store_true", help="print CSV (a header line, then the rows)")
