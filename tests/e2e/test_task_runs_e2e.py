"""A task re-run in place (taskRetryCount) read back run by run in a running platform, both shapes: OpenPAI
v1.8's task attempts in /api/v2 are the task's runs (each with its own container and exit code, latest
first), each run's log list leads to what that run printed, and v1's log and task profile routes reach
every run through ``taskAttempt`` (by default the task's current run), as ``paiq logs --run`` does."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import raw
from tests.e2e.test_task_retries import job
from tests.infra import REPO, Platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def test_each_run_of_a_re_run_task_has_its_container_exit_log_and_profile(
        platform: Platform, api: PaiqClient, user: str, tmp_path: Path) -> None:
    name = unique("taskruns-")
    # Runs 0 and 1 fail with 3, run 2 succeeds; each says which it is and lives long enough to be sampled (7 s:
    # a loaded run once sampled a 4 s run not at all).
    await api.submit_v2(job(name, ['echo "this is run $FC_TASK_ATTEMPT_ID"', "sleep 7",
                                   'test "$FC_TASK_ATTEMPT_ID" = 2 || exit 3'], task_retry_count=2))
    detail, seen = await wait_final(api, user, name)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail["jobStatus"])
    token = {"Authorization": f"Bearer {api._token}"}

    async def get(path: str) -> Any:
        status, body, _ = await raw(platform, "GET", path, headers=token)
        assert status == 200, (path, status, body)
        return body

    v2 = await get(f"/api/v2/jobs/{user}~{name}")
    [task] = v2["taskRoles"]["main"]["taskStatuses"]
    assert (task["attemptId"], task["retries"]) == (2, 2), task
    assert task["containerLog"].endswith("/attempts/0/taskRoles/main/taskIndex/0/attempts/2/logs")
    runs = (await get(task["containerLog"].rsplit("/", 2)[0]))["attempts"]
    assert [(r["attemptId"], r["attemptState"], r["containerExitCode"]) for r in runs] == [
        (2, "SUCCEEDED", 0), (1, "FAILED", 3), (0, "FAILED", 3)], runs
    assert len({r["containerId"] for r in runs}) == 3 and all(r["containerId"] for r in runs), "a container each"
    assert all(r["currentAttemptCompletedTime"] and r["currentAttemptLaunchedTime"] for r in runs), runs

    log = f"/api/v1/user/{user}/jobs/{name}/tasks/main/0/log"
    profile = f"/api/v1/user/{user}/jobs/{name}/tasks/main/0/profile"
    for run in runs:
        n = run["attemptId"]
        locations = {loc["name"]: loc["uri"] for loc in (await get(run["containerLog"]))["locations"]}
        status, text, headers = await raw(platform, "GET", locations["stdout"], headers=token)
        assert (status, text, headers["X-Task-Attempt"]) == (200, f"this is run {n}\n", str(n)), (status, text)
        status, text, _ = await raw(platform, "GET", f"{log}?taskAttempt={n}", headers=token)
        assert text == f"this is run {n}\n"
        sampled = await get(f"{profile}?taskAttempt={n}")
        assert sampled["taskAttempt"] == n and sampled["task"] is not None and sampled["points"], sampled
    status, text, _ = await raw(platform, "GET", log, headers=token)
    assert text == "this is run 2\n", "v1's log is the task's current run's"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PAIQ_")},
           "PAIQ_API": platform.api, "PAIQ_USER": user, "PAIQ_TOKEN": api._token or "", "PAIQ_DATA_DIR": str(tmp_path)}
    for args, printed in ((["--run", "1"], "this is run 1\n"), ([], "this is run 2\n"),
                          (["--attempt", "0", "--run", "0"], "this is run 0\n")):
        cli = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "services.cli.main", "logs", name, *args],
                                      env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert (cli.returncode, cli.stdout) == (0, printed), (args, cli.stderr)
    assert (await get(profile))["taskAttempt"] == 2
    status, body, _ = await raw(platform, "GET", task["containerLog"].replace("/attempts/2/logs", "/attempts/3/logs"),
                                headers=token)
    assert (status, body["code"]) == (404, "NoTaskLogError")
