"""The paiq CLI against a running platform: login, submit --wait, jobs, status, stop."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import ALL_IN_ONE_ONLY, job_config
from tests.e2e.feedwatch import FeedProxy
from tests.infra import ADMIN_PASSWORD, REPO, Platform

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), ALL_IN_ONE_ONLY]  # an HTTP client of the API


async def paiq(platform: Platform, home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAIQ_")}
    env.update({"PAIQ_DATA_DIR": str(home), "PAIQ_API": platform.api})
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "services.cli.main", *args], input=stdin, env=env, cwd=REPO,
        capture_output=True, text=True, timeout=120)


async def test_login_then_submit_wait_reports_each_state_and_the_outcome(
        platform: Platform, admin: PaiqClient, user: str, tmp_path: Path) -> None:
    await admin.put_user(user, "cli-secret")
    login = await paiq(platform, tmp_path, "--user", user, "login", "--password-stdin", stdin="cli-secret\n")
    assert login.returncode == 0, login.stderr
    saved = json.loads((tmp_path / "credentials.json").read_text())
    assert saved["user"] == user and saved["api"] == platform.api
    assert oct((tmp_path / "credentials.json").stat().st_mode & 0o777) == "0o600"

    good = tmp_path / "good.json"
    good.write_text(json.dumps(job_config("cli-good", command="sleep 1; echo fine")))
    run = await paiq(platform, tmp_path, "submit", str(good), "--wait")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert any(" RUNNING" in line for line in lines)
    assert lines[-1].startswith(f"{user}~cli-good SUCCEEDED, exit code 0")

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(job_config("cli-bad", command="exit 5")))
    failed = await paiq(platform, tmp_path, "submit", str(bad), "--wait")
    assert failed.returncode == 1
    assert "FAILED, exit code 5" in failed.stdout

    status = await paiq(platform, tmp_path, "status", "cli-bad")
    assert status.returncode == 0 and "FAILED" in status.stdout and "main[0]" in status.stdout
    jobs = await paiq(platform, tmp_path, "jobs")
    assert f"{user}~cli-good" in jobs.stdout and f"{user}~cli-bad" in jobs.stdout


async def test_cli_errors_are_one_clear_line(platform: Platform, admin: PaiqClient, user: str,
                                             tmp_path: Path) -> None:
    await admin.put_user(user, "cli-secret")
    await paiq(platform, tmp_path, "--user", user, "login", "--password-stdin", stdin="cli-secret\n")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"jobName": "x y", "image": "i", "taskRoles": []}))
    refused = await paiq(platform, tmp_path, "submit", str(broken))
    assert refused.returncode == 2
    assert refused.stderr.startswith("paiq: jobName: must match") and "(InvalidParametersError)" in refused.stderr
    assert "Traceback" not in refused.stderr
    missing = await paiq(platform, tmp_path, "status", "no-such-job")
    assert missing.returncode == 2 and "NoJobError" in missing.stderr
    wrong = await paiq(platform, tmp_path, "--user", user, "login", "--password-stdin", stdin="nope\n")
    assert wrong.returncode == 2 and "user name or password is wrong" in wrong.stderr


async def test_no_password_or_token_reaches_the_logs(platform: Platform, admin: PaiqClient, user: str) -> None:
    await admin.put_user(user, "very-secret-password")
    token = (await admin.with_token(None).login(user, "very-secret-password"))["token"]
    client = admin.with_token(token)
    await client.submit(user, json.dumps(job_config("quiet", command="true")).encode())
    await client.stop(user, "quiet")
    logs = platform.logs()
    assert user in logs, "the platform logs what happens"
    assert "very-secret-password" not in logs
    assert token not in logs
    assert ADMIN_PASSWORD not in logs


async def test_paiq_events_tails_one_jobs_lifecycle(platform: Platform, admin: PaiqClient, user: str,
                                                    tmp_path: Path) -> None:
    await admin.put_user(user, "cli-secret")
    await paiq(platform, tmp_path, "--user", user, "login", "--password-stdin", stdin="cli-secret\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAIQ_")}
    async with FeedProxy(platform.api) as proxy:  # sees when the feed is connected
        env.update({"PAIQ_DATA_DIR": str(tmp_path), "PAIQ_API": proxy.url})
        tail = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", "events", "--job", "tailed", env=env, cwd=REPO,
            stdout=asyncio.subprocess.PIPE)
        try:
            await asyncio.wait_for(proxy.feed_open.wait(), 30)  # connected before the job exists
            config = tmp_path / "tailed.json"
            config.write_text(json.dumps(job_config("tailed", command="exit 2")))
            await paiq(platform, tmp_path, "submit", str(config))
            lines: list[str] = []
            assert tail.stdout is not None
            while not lines or "job.completed" not in lines[-1]:
                lines.append((await asyncio.wait_for(tail.stdout.readline(), 60)).decode().rstrip())
        finally:
            tail.terminate()
            await tail.wait()
    kinds = [line.split()[1] for line in lines]
    # each statement once: delivery is at least once, and a repeat says the same past its time (docs)
    said = [line.split(None, 1)[1] for line in lines if line.split()[1] != "task.progress"]
    assert [k.split()[0] for k in dict.fromkeys(said)] == [
        "job.submitted", "job.scheduled", "task.started", "task.exited", "job.completed"], lines
    assert all(f"{user}~tailed~" in line for line in lines)
    assert "main[0] exit_code=2" in lines[kinds.index("task.exited")]
    assert "state=FAILED exit_code=2" in lines[-1]
