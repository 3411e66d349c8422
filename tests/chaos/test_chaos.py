"""Reliability under faults: paiq's separate processes keep every job's outcome while each of them, the
database and the broker is killed or cut off once (issue 13).

One run (the module's ``chaos`` fixture, tests/chaos/scenario.py: two schedulers, two launchers, a
disk-backed SecantusDB and a private RabbitMQ node, ~100 jobs, six faults) and one test per property,
so a failure names the property that broke. Logs of every process stay in the run's directory, named in
each message.
"""

from __future__ import annotations

import pytest

from tests.chaos.observers import ApiAnswer, HealthSample, reported_role
from tests.chaos.scenario import OUTAGE_GRACE_S, ChaosReport, Fault
from tests.chaos.workload import mismatch

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

SUBMIT_RESTART_S = 20.0  # after submit is started again: it needs a few seconds to listen
SERVICES = ("submit", "status", "scheduler-1", "scheduler-2", "launcher-a", "launcher-b")


def where(report: ChaosReport) -> str:
    return f"(logs of every process and chaos-summary.json, the run's timeline: {report.workdir})"


def tails(report: ChaosReport, services: tuple[str, ...] = SERVICES, lines: int = 15) -> str:
    return "\n".join(f"--- {s}, last {lines} lines ---\n{report.tail(s, lines)}" for s in services)


async def test_every_submission_is_accepted(chaos: ChaosReport) -> None:
    """Each job is accepted in the end: 202, or the first 202 repeated for its Idempotency-Key when a try's
    answer was lost. A 409 is not an acceptance."""
    refused = [s.describe() for s in chaos.submissions if not s.accepted]
    assert chaos.submissions, "no job was submitted"
    assert not refused, f"{len(refused)} of {len(chaos.submissions)} jobs never accepted:\n" + "\n".join(refused)


async def test_no_5xx_answer_hid_a_stored_job(chaos: ChaosReport) -> None:
    """A 5xx means nothing was stored: no retry after one found its job already stored."""
    hidden = [s.describe() for s in chaos.submissions if s.hidden_by_5xx]
    assert not hidden, "jobs stored by a try answered 5xx:\n" + "\n".join(hidden) + f"\n{where(chaos)}"


async def test_every_accepted_job_ends_in_its_expected_state(chaos: ChaosReport) -> None:
    """SUCCEEDED or FAILED (with its exit code) as its command decides, within the bound after the last fault."""
    accepted = [s for s in chaos.submissions if s.accepted]
    wrong = [m for s in accepted if (m := mismatch(s, chaos.final.get(s.plan.name)))]
    late = ", ".join(chaos.not_final_in_time)
    assert not wrong, (
        f"{len(wrong)} of {len(accepted)} accepted jobs did not end as planned"
        + (f" ({len(chaos.not_final_in_time)} still not final {chaos.final_wait_s:.0f}s after the last fault: "
           f"{late})" if late else "")
        + ":\n" + "\n".join(wrong) + f"\n{where(chaos)}\n{tails(chaos)}")


async def test_no_task_attempt_ran_in_two_containers(chaos: ChaosReport) -> None:
    """Every (job, role, index, attempt) started at most one container, removed ones included (the engine's
    event stream saw every start)."""
    assert not chaos.container_watch_error, f"the Docker event stream failed: {chaos.container_watch_error}"
    succeeded = {s.plan.name for s in chaos.submissions if chaos.final.get(s.plan.name, {}).get("state")
                 == "SUCCEEDED"}
    seen = {job_id.split("~")[1] for job_id in chaos.jobs_with_containers}
    assert succeeded <= seen, f"the watch saw no container of succeeded jobs {sorted(succeeded - seen)}"
    twice = [f"{job} {role}[{index}] attempt {attempt}: containers {sorted(c[:12] for c in ids)}"
             for (job, role, index, attempt), ids in sorted(chaos.started_twice.items())]
    assert not twice, "tasks that ran in two containers in one attempt:\n" + "\n".join(twice) + f"\n{where(chaos)}"


async def test_no_task_container_is_left_running(chaos: ChaosReport) -> None:
    """Once every job is over, no container of the platform's nodes still runs."""
    assert not chaos.left_running, ("containers still running after every job ended:\n"
                                    + "\n".join(chaos.left_running) + f"\n{where(chaos)}")


async def test_nothing_is_dead_lettered_and_no_message_is_left_waiting(chaos: ChaosReport) -> None:
    """The dead-letter queue is empty and no service queue has a ready message left."""
    assert not chaos.queues_error, f"could not list the broker's queues: {chaos.queues_error}"
    dead = f"{chaos.queue_prefix}.dead"
    assert dead in chaos.queues, f"no dead-letter queue {dead} on the broker: {sorted(chaos.queues)}"
    assert chaos.queues[dead][0] == 0, (f"{chaos.queues[dead][0]} messages dead-lettered into {dead}\n"
                                        f"{tails(chaos, lines=30)}")
    waiting = {q: ready for q, (_, ready) in chaos.queues.items() if ready}
    assert not waiting, f"messages left ready (unconsumed) at the end: {waiting}\n{where(chaos)}"


def excused(answer: ApiAnswer, faults: list[Fault]) -> bool:
    """No answer while submit was down (and restarting); a 503 while the broker was down. The database's
    15 s away is within the 30 s a request waits for it: its requests are delayed, never refused."""
    for f in faults:
        if f.name == "kill submit" and answer.status is None and f.start_s <= answer.at_s <= f.end_s + SUBMIT_RESTART_S:
            return True
        if f.name == "broker down" and answer.status == 503 and f.start_s <= answer.at_s <= f.end_s + OUTAGE_GRACE_S:
            return True
    return False


async def test_the_api_answers_without_5xx_outside_outages(chaos: ChaosReport) -> None:
    """Every request got an answer below 500 (within observers.API_TIMEOUT_S), except no answer while submit
    itself was down and a truthful 503 while the broker was down."""
    assert chaos.api is not None
    bad = [a for a in chaos.api.answers if (a.status is None or a.status >= 500) and not excused(a, chaos.faults)]
    faults = ", ".join(f"{f.name} {f.start_s:.1f}-{f.end_s:.1f}s" for f in chaos.faults)
    lines = [f"t={a.at_s:.1f}s {a.method} {a.path} -> {a.status or 'no answer'} {a.detail}" for a in bad[:30]]
    assert not bad, (f"{len(bad)} of {len(chaos.api.answers)} API requests failed outside the faults ({faults}):\n"
                     + "\n".join(lines) + f"\n{where(chaos)}\n{tails(chaos, ('submit',), 30)}")


async def test_every_service_is_healthy_at_the_end(chaos: ChaosReport) -> None:
    """Without anyone's help every service answers /healthz 200, one scheduler leading and one standing by."""
    sick = {s: h.short() for s, h in chaos.end_health.items() if h.code != 200}
    assert not sick, f"services not healthy at the end: {sick}\n{tails(chaos, tuple(sick), 30)}"
    roles = {s: reported_role(h.body) for s, h in chaos.end_health.items() if s.startswith("scheduler")}
    assert sorted(map(str, roles.values())) == ["leader", "standby"], (
        f"the schedulers' /healthz roles at the end: {roles} (expected one leader, one standby)")


def unhealthy_during(chaos: ChaosReport, outage: str) -> dict[str, list[HealthSample]]:
    """Services that never answered 503 while ``outage`` lasted, with what they answered instead."""
    assert chaos.health is not None
    f = chaos.fault(outage)
    never = {}
    for service in SERVICES:
        samples = chaos.health.between(service, f.start_s, f.end_s)
        if not any(s.code == 503 for s in samples):
            never[service] = samples
    return never


def describe_never(never: dict[str, list[HealthSample]]) -> str:
    return "\n".join(f"{service}: " + ", ".join(s.short() for s in samples[-12:]) for service, samples in never.items())


async def test_every_service_said_unhealthy_while_the_database_was_down(chaos: ChaosReport) -> None:
    """/healthz is truthful: 503 from every service at least once during the 15 s without the database."""
    never = unhealthy_during(chaos, "database down")
    assert not never, ("services that never answered /healthz 503 while the database was down:\n"
                       + describe_never(never))


async def test_every_service_said_unhealthy_while_the_broker_was_down(chaos: ChaosReport) -> None:
    """/healthz is truthful: 503 from every service at least once during the 10 s without the broker."""
    never = unhealthy_during(chaos, "broker down")
    assert not never, ("services that never answered /healthz 503 while the broker was down:\n"
                       + describe_never(never))


async def test_no_process_exited_unless_killed(chaos: ChaosReport) -> None:
    """Every process survived the outages it was not killed in (the harness restarted any that exited)."""
    assert not chaos.self_exits, (f"{len(chaos.self_exits)} processes exited by themselves "
                                  f"(the harness restarted them):\n\n" + "\n\n".join(e.describe()
                                                                                     for e in chaos.self_exits))
