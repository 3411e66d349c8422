"""A database outage kills no job, a 503 stores nothing, a hung path to the database heals (issue 24).

One run (tests/chaos/outages.py, a few minutes) and one test per property."""

from __future__ import annotations

from collections.abc import AsyncIterator

import docker
import pytest

from tests.chaos.outages import FREEZE_S, HEALTHY_AGAIN_S, OutageReport, run_outages

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

SERVICES = ("submit", "status", "scheduler-1", "scheduler-2", "launcher-a", "launcher-b")


@pytest.fixture(scope="module")
async def outages(tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient) -> AsyncIterator[
        OutageReport]:
    report, teardown = await run_outages(tmp_path_factory.mktemp("outages"), docker_client)
    try:
        yield report
    finally:
        await teardown()


def tails(report: OutageReport, services: tuple[str, ...] = SERVICES, lines: int = 20) -> str:
    return "\n".join(f"--- {s}, last {lines} lines ---\n{report.tail(s, lines)}" for s in services) + \
        f"\n(logs: {report.workdir})"


async def test_no_job_is_retried_for_an_outage_and_every_exit_code_is_the_real_one(outages: OutageReport) -> None:
    """Jobs that ended while nobody could record it keep their real exit codes; jobs that ran through it
    are not restarted: no attempt ends -1001 NodeLost for the database's absence."""
    wrong = []
    for outage in outages.outages:
        for job in outage.jobs:
            summary = outage.final.get(job.name, {})
            got = (summary.get("state"), summary.get("appExitCode") if job.exit_code is not None else None,
                   summary.get("retries"))
            if got != (job.state, job.exit_code, 0):
                wrong.append(f"{outage.fault.name if outage.fault else outage.down_s}: {job.name} ({job.command}) "
                             f"expected {job.state} exit {job.exit_code} retries 0, got state {got[0]} exit "
                             f"{summary.get('appExitCode')} retries {got[2]} (reason {summary.get('reason')!r})")
    assert len(outages.outages) == 2
    assert not wrong, "\n".join(wrong) + "\n" + tails(outages)


async def test_no_node_is_lost(outages: OutageReport) -> None:
    """Neither outage nor launcher b's hung path (shorter than the node timeout) made a node lost."""
    assert outages.lost_nodes == [], f"nodes marked lost: {outages.lost_nodes}\n" + tails(
        outages, ("scheduler-1", "scheduler-2"))


@pytest.mark.parametrize("which", [0, 1], ids=["40s", "90s"])
async def test_every_service_is_healthy_again_by_itself_soon_after_the_database_returns(
        outages: OutageReport, which: int) -> None:
    outage = outages.outages[which]
    assert outage.healthy_after_s is not None, (
        f"not every service answered /healthz 200 within 60 s of the database's return after "
        f"{outage.down_s:.0f} s: {[s.short() + ' ' + s.service for s in outage.last_unhealthy]}\n" + tails(outages))
    assert outage.healthy_after_s <= HEALTHY_AGAIN_S, (
        f"every service healthy only {outage.healthy_after_s:.1f} s after the database's return")


async def test_posts_during_a_restart_are_stored_once_with_their_key_or_answered_503_storing_nothing(
        outages: OutageReport) -> None:
    posts = outages.posts
    assert len(posts) == 20
    lies = [f"{p.name}: answered {p.status} {p.detail} but stored={p.stored}" for p in posts
            if (p.status == 202) != p.stored]
    other = [f"{p.name}: answered {p.status} {p.detail}" for p in posts if p.status not in (202, 503)]
    keyless = [p.name for p in posts if p.stored and not p.has_key]
    assert not lies and not other and not keyless, (
        f"answers that hid the truth: {lies}; answers neither 202 nor 503: {other}; stored without a key: "
        f"{keyless}\n" + tails(outages, ("submit",)))
    assert any(p.status == 202 for p in posts), "no POST was stored: the restart took them all"


async def test_a_launcher_whose_database_path_hangs_says_so_and_recovers_by_itself(outages: OutageReport) -> None:
    """Its calls fail at its driver deadline instead of hanging: /healthz 503 while the path hangs, /livez
    200 throughout (it is not wedged), and healthy again soon after the path forwards again."""
    freeze = outages.freeze
    samples = ", ".join(s.short() for s in freeze.samples[-20:])
    assert freeze.said_unhealthy, f"launcher b never said 503 while its path to the database hung {FREEZE_S:.0f} s: " \
                                  f"{samples}"
    assert freeze.live_throughout, "launcher b's /livez failed while its calls only failed (not stuck)"
    assert freeze.recovered_after_s is not None and freeze.recovered_after_s <= 15, (
        f"launcher b healthy again {freeze.recovered_after_s} s after its path forwarded again: {samples}\n"
        + tails(outages, ("launcher-b",), 40))


async def test_no_process_exited_by_itself(outages: OutageReport) -> None:
    assert not outages.self_exits, "\n\n".join(e.describe() for e in outages.self_exits)
