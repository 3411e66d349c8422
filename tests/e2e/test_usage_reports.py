"""Usage reports on the whole platform (the four services as separate processes: status writes the rollups,
submit reads them): two users in two virtual clusters run jobs holding declared GPUs (PAIQ_NODE_GPUS, with
PAIQ_GPU_DEVICES=none: scheduled and held, not handed to the engine; no NVML here, so nothing is measured),
one of them retried, and the report, by user and by VC, in JSON, CSV and
through ``paiq usage``, says what the jobs' own records say they held; each user sees only their own and
their VC's rows."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from services.cli.client import ApiCallError, PaiqClient, paiq_client
from tests.e2e.browser import chromium
from tests.e2e.conftest import job_config, logged_in, raw
from tests.e2e.test_cli import paiq
from tests.e2e.test_portal import CSP_WATCH, cells
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, start_platform, stop_platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

H_MS = 3_600_000


@pytest.fixture(scope="module")
def gpu_platform(tmp_path_factory: pytest.TempPathFactory, mongo_uri: str, amqp_url: str,
                 docker_client: docker.DockerClient) -> Iterator[Platform]:
    p = start_platform("separate", tmp_path_factory.mktemp("usage"), mongo_uri=mongo_uri, amqp_url=amqp_url,
                       PAIQ_NODE_GPUS="0:V100,1:V100,2:V100,3:V100", PAIQ_GPU_DEVICES="none")
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


@pytest.fixture
async def admin(gpu_platform: Platform) -> AsyncIterator[PaiqClient]:
    async with paiq_client(gpu_platform.api) as anonymous:
        yield anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])


def held_by_records(detail: dict[str, Any]) -> tuple[float, float, int]:
    """GPU-hours and core-hours held by every attempt of a finished job, from its detail's task times."""
    gpus = cores = 0.0
    tasks = [t for role in detail["taskRoles"].values() for t in role["taskStatuses"]]
    tasks += [t for a in detail["jobStatus"]["attempts"] for t in a["taskStatuses"]]
    for t in tasks:
        if t["launchedTime"] is None:
            continue
        hours = (t["completedTime"] - t["launchedTime"]) / H_MS
        gpus += len((t["containerGpus"] or "").split(",")) * hours if t["containerGpus"] else 0.0
        cores += hours  # every role here asks 1 CPU
    return gpus, cores, 1 + len(detail["jobStatus"]["attempts"])


def summed(rows: list[dict[str, Any]], vc: str, user: str | None = None) -> tuple[float, float, int, int]:
    mine = [r for r in rows if r["virtualCluster"] == vc and (user is None or r["user"] == user)]
    return (sum(r["gpuHoursHeld"] for r in mine), sum(r["cpuCoreHoursHeld"] for r in mine),
            sum(r["jobs"] for r in mine), sum(r["attempts"] for r in mine))


async def test_the_report_says_what_two_users_in_two_vcs_held(gpu_platform: Platform, admin: PaiqClient,
                                                              tmp_path: Path) -> None:
    ana, ben = unique("ana"), unique("ben")
    va, vb = unique("va"), unique("vb")
    for vc, user in ((va, ana), (vb, ben)):
        await admin.put_virtual_cluster(vc, {"cpus": 40, "memory": 40, "gpus": 50}, [user])
    ana_c, ben_c = await logged_in(admin, ana), await logged_in(admin, ben)
    one = [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 1,
            "command": "sleep 1; exit 1"}]
    two = [{"name": "main", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 1, "command": "sleep 2"}]
    jobs = {(ana, va): unique("retried"), (ben, vb): unique("pair")}
    await ana_c.submit(ana, json.dumps(job_config(jobs[(ana, va)], command="", roles=one, retryCount=1,
                                                  virtualCluster=va)).encode())
    await ben_c.submit(ben, json.dumps(job_config(jobs[(ben, vb)], command="", roles=two,
                                                  virtualCluster=vb)).encode())
    expected = {}
    for (user, vc), name in jobs.items():
        await wait_final(admin, user, name)
        expected[(user, vc)] = held_by_records(await admin.job(user, name))
    assert expected[(ana, va)][2] == 2, "ana's job ran twice (retryCount 1)"

    report = await admin.usage({})
    for (user, vc), (gpu_h, core_h, attempts) in expected.items():
        assert summed(list(report["rows"]), vc, user) == (pytest.approx(gpu_h, abs=1e-4),
                                                          pytest.approx(core_h, abs=1e-4), 1, attempts)
        assert gpu_h > 0
    by_vc = await admin.usage({"by": "vc", "vc": vb})
    assert {r["virtualCluster"] for r in by_vc["rows"]} == {vb} and all(r["user"] is None for r in by_vc["rows"])
    assert summed(list(by_vc["rows"]), vb)[0] == pytest.approx(expected[(ben, vb)][0], abs=1e-4)
    assert all(r["gpuHoursMeasured"] == 0 and r["gpuUtilization"] is None for r in report["rows"]), "no NVML here"

    seen = await ana_c.usage({})
    assert {(r["virtualCluster"], r["user"]) for r in seen["rows"] if r["virtualCluster"] in (va, vb)} == {(va, ana)}
    with pytest.raises(ApiCallError) as refused:
        await ana_c.usage({"vc": vb})
    assert refused.value.status == 403

    token = (await admin.with_token(None).login(ben, "secret-pass"))["token"]
    status, body, headers = await raw(gpu_platform, "GET", f"/api/v1/usage?format=csv&vc={vb}",
                                      headers={"Authorization": f"Bearer {token}"})
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(body)))
    assert sum(float(r["gpu_hours_held"]) for r in table) == pytest.approx(expected[(ben, vb)][0], abs=1e-4)
    status, body, _ = await raw(gpu_platform, "GET", "/api/v1/usage?from=2026-01-01&to=2026-12-31",
                                headers={"Authorization": f"Bearer {token}"})
    assert (status, body["code"]) == (400, "InvalidParametersError") and "at most 92" in body["message"]

    home = tmp_path / "home"
    home.mkdir()
    login = await paiq(gpu_platform, home, "--user", ana, "login", "--password-stdin", stdin="secret-pass\n")
    assert login.returncode == 0, login.stderr
    shown = await paiq(gpu_platform, home, "usage", "--vc", va)
    assert shown.returncode == 0, shown.stderr
    assert any(line.startswith(f"{va} ") and "GPU-hours held" in line and "1 jobs, 2 attempts" in line
               for line in shown.stdout.splitlines()), shown.stdout
    as_csv = await paiq(gpu_platform, home, "usage", "--csv", "--user", ana)
    assert as_csv.stdout.splitlines()[0].startswith("day,vc,user,gpu_hours_held"), as_csv.stdout
    wrong = await paiq(gpu_platform, home, "usage", "--from", "yesterday")
    assert wrong.returncode == 1 and "from: must be a UTC day" in wrong.stderr

    # The portal's Usage page, as ben: a card for his VC with its days' bars and his total, none for ana's.
    async with chromium() as page:
        await page.call("Page.addScriptToEvaluateOnNewDocument", source=CSP_WATCH)
        await page.goto(f"{gpu_platform.api}/#/usage?token={token}")
        card = f"[data-vc={json.dumps(vb)}]"
        await page.wait(f"!!document.querySelector({json.dumps(card + ' svg[data-chart]')})", "ben's VC's chart")
        drawn = await page.eval(f"[...document.querySelectorAll({json.dumps(card + ' svg g[data-held]')})]"
                                ".reduce((s, g) => s + Number(g.dataset.held), 0)")
        assert drawn == pytest.approx(expected[(ben, vb)][0], abs=1e-4)
        assert (await cells(page, f"{card} tr[data-user={json.dumps(ben)}]"))[:2] == [
            ben, f"{round(expected[(ben, vb)][0], 2):g}"]
        assert await page.eval(f"document.querySelector({json.dumps(f'[data-vc={json.dumps(va)}]')})") is None
        assert (await page.eval("document.querySelector('#usage-csv').download")).endswith(".csv")
        assert await page.eval("window.cspViolations") == [] and page.errors == []
