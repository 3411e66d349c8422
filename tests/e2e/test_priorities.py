"""Priorities on the real platform: the queue's order, its view (API and CLI), and what users may ask for."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest

from services.cli.client import ApiCallError, PaiqClient
from tests.e2e.conftest import job_config
from tests.infra import ADMIN_USER, REPO, Platform, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def prio_job(name: str, vc: str, command: str, priority: str | None = None) -> bytes:
    extras = {"hivedScheduler": {"jobPriorityClass": priority}} if priority else {}
    return json.dumps(job_config(name, command=command, virtualCluster=vc, extras=extras, roles=[
        {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "command": command}])).encode()


async def _until_queued(api: PaiqClient, vc: str, names: list[str], limit_s: float = 30,
                        share: float | None = None) -> dict[str, Any]:
    """The VC's queue once it holds exactly ``names``, every one judged (a reason written) and, with
    ``share``, its user's share as a pass after the first placement stored it."""
    queue: dict[str, Any] = {}
    for _ in range(int(limit_s / 0.2)):
        queue = await api.queue(vc)
        jobs = queue["jobs"]
        if sorted(j["name"] for j in jobs) == sorted(names) and all(j["reason"] for j in jobs) \
                and (share is None or all(j["userShare"] == share for j in jobs)):
            return queue
        await asyncio.sleep(0.2)
    raise AssertionError(f"the queue of {vc} is {queue}, not {names}")


async def test_a_prod_job_queued_after_a_test_job_starts_first_and_the_queue_says_why(
        platform: Platform, admin: PaiqClient, api: PaiqClient, user: str) -> None:
    vc = f"prio{user[-6:]}"
    # 3.125% of the node's 32 CPUs: one 1-CPU job at a time (this machine's engine has 2 CPUs)
    await admin.put_virtual_cluster(vc, {"cpus": 3.125, "memory": 3.125, "gpus": 0}, ["*"])
    await api.submit(user, prio_job("blocker", vc, "sleep 3", priority="prod"))  # prod: not preempted for late-prod
    await api.submit(user, prio_job("early-test", vc, "true"))
    await api.submit(user, prio_job("late-prod", vc, "true", priority="prod"))
    queue = await _until_queued(api, vc, ["early-test", "late-prod"])
    assert [(j["position"], j["name"], j["priority"]) for j in queue["jobs"]] == [
        (1, "late-prod", "prod"), (2, "early-test", "test")], "priority before age"
    assert all(f"virtual cluster {vc} would exceed its quota" in j["reason"] for j in queue["jobs"])
    detail = (await api.job(user, "early-test"))["jobStatus"]
    assert str(detail["reason"]).startswith(f"position 2 in virtual cluster {vc}'s queue"), detail["reason"]
    prod, _ = await wait_final(api, user, "late-prod")
    test, _ = await wait_final(api, user, "early-test")
    blocker, _ = await wait_final(api, user, "blocker")
    assert prod["jobStatus"]["state"] == test["jobStatus"]["state"] == "SUCCEEDED"
    assert prod["jobStatus"]["appLaunchedTime"] >= blocker["jobStatus"]["appCompletedTime"]
    assert test["jobStatus"]["appLaunchedTime"] >= prod["jobStatus"]["appCompletedTime"], "prod ran first"
    assert (await api.queue(vc))["jobs"] == []


async def test_paiq_queue_prints_the_order_and_the_reasons(
        platform: Platform, admin: PaiqClient, api: PaiqClient, user: str) -> None:
    vc = f"cli{user[-6:]}"
    await admin.put_virtual_cluster(vc, {"cpus": 3.125, "memory": 3.125, "gpus": 0}, ["*"])
    await api.submit(user, prio_job("holder", vc, "sleep 30", priority="prod"))  # prod: urgent does not preempt it
    await api.submit(user, prio_job("regular", vc, "true"))
    await api.submit(user, prio_job("urgent", vc, "true", priority="prod"))
    await _until_queued(api, vc, ["regular", "urgent"], share=1.0)  # the holder: all of the VC's one CPU
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAIQ_")}
    env["PAIQ_API"] = platform.api
    done = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.cli.main", "queue", vc, env=env,
                                                cwd=REPO, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await done.communicate()
    assert done.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].split()[:4] == ["#", "PRIORITY", "SHARE", "WAITING"]
    assert [line.split()[:2] for line in lines[1:]] == [["1", "prod"], ["2", "test"]]
    assert f"{user}~urgent" in lines[1] and "would exceed its quota" in lines[1]
    assert [float(line.split()[2]) for line in lines[1:]] == [1.0, 1.0], "the SHARE column"
    await api.stop(user, "holder")


async def test_an_unknown_class_is_refused_naming_the_field_and_crit_is_for_administrators(
        admin: PaiqClient, api: PaiqClient, user: str) -> None:
    with pytest.raises(ApiCallError) as refused:
        await api.submit(user, prio_job("urgent", "default", "true", priority="urgent"))
    assert refused.value.status == 400
    assert ('extras.hivedScheduler.jobPriorityClass: must be one of crit, prod, test, oppo; got "urgent"'
            in refused.value.message)
    with pytest.raises(ApiCallError) as refused:
        await api.submit(user, prio_job("critical", "default", "true", priority="crit"))
    assert refused.value.status == 403 and "crit is for administrators" in refused.value.message
    answer, _ = await admin.submit(ADMIN_USER, prio_job(f"critical{user[-6:]}", "default", "true", priority="crit"))
    assert "successfully" in answer["message"]
    done, _ = await wait_final(admin, ADMIN_USER, f"critical{user[-6:]}")
    assert done["jobStatus"]["state"] == "SUCCEEDED"
