"""The web portal in a real headless Chromium (tests/e2e/browser.py): log-in, the live job list, a failed
job's reason and log, submission refusals, Stop, virtual clusters, usage charts, and the page's security policy.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.cli.client import PaiqClient
from services.submit.routes.pages import PORTAL_DIR
from shared.admission.validation import Rejected, parse_job_json, validate_job_config
from tests.e2e.browser import Page, chromium
from tests.e2e.conftest import job_config, logged_in
from tests.infra import FINAL, REPO, Platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
# The portal is the submit service's, the same in both platform shapes: one shape keeps this module short.
ALL_IN_ONE = pytest.mark.parametrize("platform", ["all-in-one"], indirect=True)
PASSWORD = "portal-pass-1"

# --- the tests --------------------------------------------------------------------------------------


@dataclass
class Account:
    user: str
    client: PaiqClient
    token: str


@pytest.fixture
async def account(admin: PaiqClient, user: str) -> Account:
    """The test's own user (with a password the browser types) and its token."""
    client = await logged_in(admin, user, PASSWORD)
    token = (await admin.with_token(None).login(user, PASSWORD))["token"]
    return Account(user, client, token)


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    async with chromium() as p:
        yield p
        assert p.errors == [], "the page logged errors"


async def submit(account: Account, config: dict[str, object]) -> None:
    await account.client.submit(account.user, json.dumps(config).encode())


async def settled(client: PaiqClient, user: str, name: str, limit_s: float = 60) -> dict[str, Any]:
    """The job once final and done stopping: every task ended, nothing left to change on the page."""
    await wait_final(client, user, name, limit_s)
    async with asyncio.timeout(limit_s):
        while True:
            detail = await client.job(user, name)
            tasks = [t for r in detail["taskRoles"].values() for t in r["taskStatuses"]]
            if detail["jobStatus"]["subState"] == "completed" and all(
                    t["taskState"] in FINAL and t["containerExitCode"] is not None for t in tasks):
                return detail
            await asyncio.sleep(0.2)


def row(user: str, name: str) -> str:
    return f"tr[data-user={json.dumps(user)}][data-job={json.dumps(name)}]"


async def cells(page: Page, selector: str) -> list[str]:
    return list(await page.eval(f"[...document.querySelector({json.dumps(selector)}).cells].map(c => c.innerText)"))


# Counts the Log buttons ever put into the page (a redraw puts new ones in).
LOG_BUTTONS_WATCH = (
    "window.logButtonsDrawn = 0; new MutationObserver((records) => { for (const r of records) for (const n of"
    " r.addedNodes) if (n.nodeType === 1) window.logButtonsDrawn += (n.matches('[id^=log-main-]') ? 1 : 0)"
    " + n.querySelectorAll('[id^=log-main-]').length; }).observe(document, { childList: true, subtree: true });")
JOB_COLUMNS = ["name", "user", "state", "subState", "reason", "vc", "tasks", "gpus", "exit", "created"]
XSS = '<img src=x onerror="window.pwned=1">oops'


@ALL_IN_ONE
async def test_log_in_then_the_list_follows_jobs_live_and_a_failed_job_shows_why_with_its_log(
        platform: Platform, account: Account, page: Page, tmp_path: Path) -> None:
    user = account.user
    await submit(account, job_config("hello", command="echo hello"))
    await submit(account, job_config("broken", command=f"echo '{XSS}'; exit 3", retryCount=1, roles=[
        {"name": "main", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128, "command": f"echo '{XSS}'; exit 3"}]))
    await submit(account, job_config("too-big", command="true", roles=[
        {"name": "main", "cpuNumber": 64, "memoryMB": 128, "command": "true"}]))
    await settled(account.client, user, "hello")
    broken = await settled(account.client, user, "broken")

    # Not logged in: the portal asks, and the form logs in with POST /api/v1/token.
    await page.call("Page.addScriptToEvaluateOnNewDocument", source=LOG_BUTTONS_WATCH)
    await page.goto(platform.api + "/")
    await page.wait("location.hash === '#/login' && !!document.querySelector('#login-form')", "the login form")
    assert await page.eval("document.querySelector('#nav').checkVisibility()") is False, "the nav before a login"
    await page.type("#login-user", user)
    await page.type("#login-password", PASSWORD)
    await page.click("#login-submit")
    await page.wait(f"!!document.querySelector({json.dumps(row(user, 'broken'))})", "the job list")
    assert await page.eval("location.hash") == "#/jobs"
    assert await page.eval("document.querySelector('#nav').checkVisibility()") is True
    assert json.loads(await page.eval("sessionStorage.getItem('paiq.session')"))["user"] == user

    jobs = {name: dict(zip(JOB_COLUMNS, await cells(page, row(user, name)), strict=True))
            for name in ("hello", "broken", "too-big")}
    assert {n: (j["user"], j["state"], j["exit"], j["tasks"], j["vc"]) for n, j in jobs.items()} == {
        "hello": (user, "SUCCEEDED", "0", "1", "default"),
        "broken": (user, "FAILED", "3", "2", "default"),
        "too-big": (user, "WAITING", "\u2014", "1", "default")}
    assert jobs["broken"]["subState"] == "completed \u00b7 1 retry"
    assert jobs["too-big"]["subState"] == "queued"
    # The reason names the queue position and why the job does not fit (its 64 CPUs), as the API does.
    waiting = next(j for j in await account.client.jobs(user) if j["name"] == "too-big")
    assert jobs["too-big"]["reason"] == waiting["reason"]
    assert re.fullmatch(r"position \d+ in virtual cluster default's queue: .*\b64\b.*", waiting["reason"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", jobs["hello"]["created"])

    # The list follows the event feed: a job submitted now appears and finishes without a reload.
    await page.wait("document.querySelector('.live').innerText.includes('live')", "the event feed to connect")
    await page.eval("window.notReloaded = true")
    await submit(account, job_config("late", command="sleep 1"))
    await page.wait(f"document.querySelector({json.dumps(row(user, 'late'))})?.dataset.state === 'SUCCEEDED'",
                    "the late job to appear and succeed", timeout_s=30)
    assert await page.eval("window.notReloaded") is True

    # Filters change in place and stay in the address.
    await page.type("#filter-user", "nobody-at-all")
    await page.press_enter()
    await page.wait("document.querySelector('#jobs-list').innerText === 'No job matches the filter.'", "no match")
    assert await page.eval("location.hash") == "#/jobs?user=nobody-at-all"
    await page.click("#only-mine")
    await page.wait(f"!!document.querySelector({json.dumps(row(user, 'late'))})", "the user's jobs again")
    # The new filter's feed asks for the list again once connected: with nothing new, the rows stay as they are.
    await page.eval(f"window.lateRow = document.querySelector({json.dumps(row(user, 'late'))})")
    await page.wait("document.querySelector('.live').innerText.includes('live') && performance.getEntriesByType("
                    f"'resource').filter((e) => e.name.includes('/jobs?username={user}&')).length >= 2",
                    "the list's refresh when its feed connects")
    await asyncio.sleep(0.5)
    assert await page.eval("window.lateRow.isConnected") is True
    assert await page.text("#jobs-summary") == f"4 jobs of {user} \u2014 1 waiting, 2 succeeded, 1 failed"

    shot = await page.screenshot()
    (tmp_path / "jobs.png").write_bytes(shot)  # to look at: pytest's basetemp keeps it
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000

    # The failed job: what the API says, shown; every task with its node, IP and exit code.
    await page.click(f"{row(user, 'broken')} a.job-link")
    await page.wait("!!document.querySelector('#exit') && !!document.querySelector('#tasks')", "the job detail")
    # The page's event feed asks for the job again once connected; an answer with nothing new redraws nothing
    # (a redraw replaces the Log buttons, and a click pressed on one and released on its replacement is lost).
    await page.wait("document.querySelector('.live').innerText.includes('live') && performance"
                    ".getEntriesByType('resource').filter((e) => e.name.endsWith('/jobs/broken')).length >= 2",
                    "the job page's refresh when its feed connects")
    await asyncio.sleep(0.5)
    assert await page.eval("window.logButtonsDrawn") == await page.eval(
        "document.querySelectorAll('[id^=log-main-]').length") > 0
    status = broken["jobStatus"]
    assert await page.text("#job-state") == "FAILED"
    assert await page.text("#exit-phrase") == status["appExitSpec"]["phrase"]
    assert await page.text("#exit-type") == status["appExitSpec"]["type"] == "USER_FAILURE"
    assert await page.text("#trigger-message") == status["appExitTriggerMessage"] != ""
    status_text = await page.text("#status")
    assert "1 (user 1, platform 0, resource 0)" in status_text
    assert await cells(page, "#attempts tr[data-attempt='0']") != []
    for task in broken["taskRoles"]["main"]["taskStatuses"]:
        shown = await cells(page, f"#tasks tr[data-task='main/{task['taskIndex']}']")
        ports = task["containerPorts"]  # every role has an http and an ssh port, as in OpenPAI
        assert shown[:9] == [str(task["taskIndex"]), task["taskState"], task["subState"] or "\u2014",
                             platform.node_id, task["containerIp"], f"http: {ports['http']}; ssh: {ports['ssh']}",
                             "\u2014",
                             str(task["containerExitCode"]), task["containerExitReason"]], shown
        assert shown[10] == "Log"
    trigger = status["appExitTriggerTaskIndex"]
    assert (await cells(page, f"#tasks tr[data-task='main/{trigger}']"))[1:8:6] == ["FAILED", "3"]

    # A task's log is text, whatever the program printed.
    await page.click(f"#log-main-{trigger}")
    log = await page.wait("document.querySelector('#log-text').textContent.includes('oops')"
                          " && document.querySelector('#log-text').textContent", "the task's log")
    assert log == XSS + "\n"
    assert await page.eval("document.querySelectorAll('img').length") == 0
    assert await page.eval("window.pwned") is None


@ALL_IN_ONE
async def test_a_refused_submission_lists_each_field_then_the_accepted_job_is_stopped_by_its_owner(
        platform: Platform, account: Account, page: Page, tmp_path: Path) -> None:
    user = account.user
    await page.goto(f"{platform.api}/#/submit?token={account.token}")
    await page.wait("!!document.querySelector('#job-file')", "the submit form")
    assert await page.eval("location.hash") == "#/submit", "the token must leave the address"

    # An invalid file, loaded with the file input: each problem on its own line.
    bad = {"jobName": "bad name!", "image": "local/busybox:latest", "retryCount": -3, "taskRoles": [
        {"name": "main", "memoryMB": 128, "shmMB": 256, "command": "true"},
        {"name": "main", "memoryMB": 128, "command": "true"}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    await page.upload("#job-file", tmp_path / "bad.json")
    await page.wait("document.querySelector('#job-config').value.includes('bad name!')", "the file in the editor")
    await page.click("#submit-job")
    await page.wait("!!document.querySelector('#problems')", "the refusal")
    parsed = parse_job_json(json.dumps(bad))
    assert isinstance(parsed, dict)
    expected = validate_job_config(parsed)
    assert isinstance(expected, Rejected)
    lines = await page.texts("#problems li")
    assert lines == [str(p) for p in expected.problems]
    assert "taskRoles[0].shmMB: must be <= memoryMB (128), got 256" in lines
    assert "taskRoles[1].name: must be unique among task roles; 'main' is also taskRoles[0]" in lines
    assert "these 4 fields" in await page.text("#submit-result")

    # A valid config typed in, with a field paiq does not know: accepted, with the warning shown.
    good = job_config("from-portal", command="echo started; sleep 120", storageGB=5, roles=[
        {"name": "main", "memoryMB": 128, "portList": [{"label": "http", "beginAt": 0, "portNumber": 1}],
         "command": "echo started; sleep 120"}])
    await page.type("#job-config", json.dumps(good, indent=2))
    await page.click("#submit-job")
    await page.wait("!!document.querySelector('#submitted-link')", "the acceptance")
    assert await page.texts("#warnings li") == ["storageGB: unknown field, ignored (kept in the stored config)"]

    # Its page: running, then stopped by its owner with the Stop button and its confirmation.
    await page.click("#submitted-link")
    await page.wait("document.querySelector('#job-state')?.innerText === 'RUNNING'", "the job to run", timeout_s=40)
    task = await cells(page, "#tasks tr[data-task='main/0']")
    assert task[1] == "RUNNING" and re.fullmatch(r"http: \d+; ssh: \d+", task[5]), task
    await page.click("#stop")
    await page.click("#stop-confirm")
    await page.wait("document.querySelector('#job-state').innerText === 'STOPPED'", "the job to stop", timeout_s=30)
    await page.wait("!!document.querySelector('#exit')", "the exit section")
    assert (await page.text("#exit")).split("\n")[:2] == ["Exit", "EXIT CODE"]
    assert await page.eval("document.querySelector('#exit .exit').innerText") == "-210"
    assert await page.text("#trigger-message") == f"stopped by {user}"
    assert "stop requested" in await page.text(".notice-ok")
    detail = await account.client.job(user, "from-portal")
    assert detail["jobStatus"]["state"] == "STOPPED" and detail["jobStatus"]["appExitCode"] == -210

    # Clone: the stored config, under the next free-looking name, in the submit form.
    await page.click("a[href^='#/submit?from=']")
    cloned = await page.wait("document.querySelector('#job-config').value.includes('from-portal-2')"
                             " && document.querySelector('#job-config').value", "the cloned config")
    assert json.loads(cloned) == {**good, "jobName": "from-portal-2"}


@ALL_IN_ONE
async def test_virtual_clusters_show_quota_capacity_use_and_jobs_per_state_live(
        platform: Platform, admin: PaiqClient, account: Account, page: Page) -> None:
    vc = unique("vc")
    await admin.put_virtual_cluster(vc, {"cpus": 25, "memory": 25, "gpus": 0}, [account.user])
    await submit(account, job_config("in-vc", command="sleep 120", virtualCluster=vc, roles=[
        {"name": "main", "taskNumber": 2, "cpuNumber": 2, "memoryMB": 1024, "command": "sleep 120"}]))
    for _ in range(200):
        if (await account.client.job(account.user, "in-vc"))["jobStatus"]["state"] == "RUNNING":
            break
        await asyncio.sleep(0.1)

    # A token that is not one: the login form says so.
    await page.goto(f"{platform.api}/#/clusters?token=not-a-token")
    await page.wait("!!document.querySelector('#login-form')", "the login form")
    assert "unknown or has expired" in await page.text(".notice-error")

    await page.goto(f"{platform.api}/#/clusters?token={account.token}")
    card = f"[data-vc={json.dumps(vc)}]"
    await page.wait(f"!!document.querySelector({json.dumps(card)})", "the VC's card")
    # The node has 32 CPUs and 64 GB: a quarter of it is the VC's; 2 tasks of 2 CPUs and 1 GB run.
    assert await cells(page, f"{card} tr[data-resource=cpus]") == ["CPUs", "25%", "4 of 8 (50%)"]
    assert await cells(page, f"{card} tr[data-resource=memoryMB]") == ["Memory", "25%", "2 GB of 16 GB (13%)"]
    assert await cells(page, f"{card} tr[data-resource=gpus]") == ["GPUs", "0%", "0 of 0"]
    assert (await page.text(f"{card} .jobs-per-state")).split() == ["Jobs:", "RUNNING", "1"]
    assert await page.text(f"{card} p.muted") == f"Open to {account.user}"

    # Stopping the job frees its share, and the page follows without a reload.
    await account.client.stop(account.user, "in-vc")
    await page.wait(f"document.querySelector({json.dumps(card + ' .jobs-per-state')}).innerText.includes('STOPPED')"
                    f" && document.querySelector({json.dumps(card + ' tr[data-resource=cpus]')})"
                    ".innerText.includes('0 of 8')", "the VC to show the stopped job, its CPUs free", timeout_s=30)


MIB = 1024 * 1024
# Records every CSP violation from before the page's first script runs (the console shows them too).
CSP_WATCH = ("window.cspViolations = []; document.addEventListener('securitypolicyviolation',"
             " (e) => window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));")


def chart(kind: str, attribute: str) -> str:
    """An attribute of the usage chart ``kind``'s <svg>, as a number (0 while it is not drawn)."""
    return f"Number(document.querySelector('svg[data-chart={kind}]')?.getAttribute('data-{attribute}') || 0)"


@ALL_IN_ONE
async def test_the_job_page_charts_a_running_tasks_usage_from_real_samples(
        platform: Platform, account: Account, page: Page, tmp_path: Path) -> None:
    assert platform.env["PAIQ_PROFILE_SECONDS"] == "1", "tests/infra.py: e2e platforms sample every second"
    user, name = account.user, "burner"
    command = "(head -c 150m /dev/zero; sleep 60) | tail & while :; do :; done"
    await submit(account, job_config(name, command=command, roles=[
        {"name": "main", "cpuNumber": 1, "memoryMB": 512, "command": command}]))
    try:
        await page.call("Page.addScriptToEvaluateOnNewDocument", source=CSP_WATCH)
        await page.goto(f"{platform.api}/#/job/{user}/{name}?token={account.token}")
        # Drawn from the launcher's samples, refreshed by the page while the job runs.
        await page.wait(f"{chart('cpu', 'points')} >= 3 && {chart('memory', 'points')} >= 3"
                        f" && {chart('memory', 'max')} >= {150 * MIB} && {chart('cpu', 'max')} >= 0.8",
                        "the CPU and memory charts to show 3 samples of a burning core and 150 MiB", timeout_s=60)
        drawn = await page.eval(f"{chart('memory', 'points')}")
        series = await account.client.task_profile(user, name, "main", 0)
        assert 3 <= drawn <= len(series["points"]), (drawn, len(series["points"]))
        assert max(p["memoryPeakBytes"] for p in series["points"]) >= 150 * MIB

        # Titled for screen readers, with the task's CPU request and memory limit as dashed lines.
        cpu_title = await page.eval("document.querySelector('svg[data-chart=cpu] > title').textContent")
        assert cpu_title.startswith("CPU (cores): ") and "1 core asked for" in cpu_title, cpu_title
        assert await page.eval("document.querySelectorAll('svg .chart-ref line[stroke-dasharray]').length") == 2
        memory_title = await page.eval("document.querySelector('svg[data-chart=memory] > title').textContent")
        assert "limit 512 MiB" in memory_title, memory_title
        ticks = await page.eval("[...document.querySelectorAll('svg[data-chart=cpu] .chart-axes text')]"
                                ".map(t => t.textContent)")
        assert any(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t) for t in ticks), ticks
        assert any(re.fullmatch(r"\d+ MiB", t) for t in await page.eval(
            "[...document.querySelectorAll('svg[data-chart=memory] .chart-axes text')].map(t => t.textContent)"))

        # A task on the task network: its network is its own, charted; no GPU, no GPU charts.
        assert await page.eval("document.querySelector('svg[data-chart=network]')") is not None
        assert await page.eval("document.querySelectorAll('[id^=chart-gpu], svg[data-chart^=gpu]').length") == 0

        # The summary names the task closest to its memory limit, and its peak; the table, each task now.
        assert await page.text("#usage-memory-task") == "main[0]"
        peak = int(await page.eval("document.querySelector('#usage-memory-peak').dataset.bytes"))
        assert peak >= 150 * MIB and re.fullmatch(r"\d+ MiB", await page.text("#usage-memory-peak"))
        assert "of 512 MiB" in await page.text("#usage-summary")
        assert "no GPUs held" in await page.text("#usage-summary")
        row = "#usage-tasks tr[data-usage-task='main[0]']"
        # the table is refreshed with the summary, apart from the charts: it may count a sample fewer for a moment
        await page.wait(f"Number(document.querySelector({json.dumps(row)})?.cells[5]?.innerText) >= 3",
                        "the task's row to count 3 samples", timeout_s=20)
        task = await cells(page, row)
        assert task[:2] == ["main[0]", platform.node_id] and task[4] == "\u2014", task
        assert re.fullmatch(r"[\d.]+ cores? of 1", task[2]) and task[3].endswith(" MiB / 512 MiB"), task
        assert int(task[5]) >= 3
        assert await page.eval("document.querySelector('#usage-charts').dataset.task") == "main[0]"

        # Live: more points arrive without a reload.
        await page.wait(f"{chart('cpu', 'points')} > {drawn}", "the charts to follow the running task", timeout_s=20)
        (tmp_path / "usage.png").write_bytes(await page.screenshot())  # to look at: pytest's basetemp keeps it
        assert await page.eval("window.cspViolations") == []
    finally:
        await account.client.stop(user, name)
    await page.wait("document.querySelector('#job-state').innerText === 'STOPPED'"
                    " && !document.querySelector('#usage-title').innerText.includes('live')",
                    "the stopped job's usage, no longer live", timeout_s=30)
    assert await page.eval(f"{chart('cpu', 'points')}") >= 3
    await settled(account.client, user, name)
    await account.client.delete(user, name)


@ALL_IN_ONE
async def test_the_page_and_its_files_are_served_with_a_strict_policy(platform: Platform, account: Account) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(platform.api + "/") as resp:
            assert resp.status == 200 and resp.content_type == "text/html"
            assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
            etag = resp.headers["ETag"]
        async with http.get(platform.api + "/", headers={"If-None-Match": etag}) as resp:
            assert resp.status == 304
        for name, kind in (("app.js", "text/javascript"), ("portal.css", "text/css"), ("favicon.svg", "image/svg+xml")):
            async with http.get(f"{platform.api}/portal/{name}") as resp:
                assert (resp.status, resp.content_type) == (200, kind)
                assert await resp.read() == (PORTAL_DIR / name).read_bytes()
        for path in ("/portal/nothing.js", "/portal/..%2Fportal.py", "/portal/%2E%2E%2Fapp.py"):
            async with http.get(platform.api + path) as resp:
                assert resp.status == 404 and (await resp.json())["code"] == "NoApiError", path
        async with http.get(platform.api + "/api/v1/whoami",
                            headers={"Authorization": f"Bearer {account.token}"}) as resp:
            assert await resp.json() == {"user": account.user, "admin": False, "groups": []}
        async with http.get(platform.api + "/api/v1/whoami") as resp:
            assert resp.status == 401 and (await resp.json())["code"] == "UnauthorizedUserError"


def test_the_portal_never_parses_data_as_html_loads_nothing_from_elsewhere_and_ships() -> None:
    files = sorted(p for p in PORTAL_DIR.iterdir() if p.is_file())
    assert {p.suffix for p in files} == {".html", ".js", ".css", ".svg"}
    for path in files:
        text = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in text, f"{path.name} uses {sink}"
        urls = re.findall(r"(?:https?:)?//[\w.-]+\.\w+", text)
        assert urls in ([], ["http://www.w3.org"]), f"{path.name} refers to {urls}"
    index = (PORTAL_DIR / "index.html").read_text()
    for ref in re.findall(r'(?:src|href)="/portal/([^"]+)"', index):
        assert (PORTAL_DIR / ref).is_file(), ref
    # Every file is package data (so an installed paiq serves it, not only a checkout).
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["services"]
    for path in files:
        relative = path.relative_to(REPO / "services").as_posix()
        assert any(fnmatch.fnmatch(relative, g) for g in globs), relative
