"""A task the engine can never start fails its job, saying why, instead of being retried without end.

The test node declares 32 CPUs (tests/infra.py); a task asking for all of them on a machine with fewer is
refused by the engine at create, the same way every time (``Range of CPUs is from 0.01 to N.00, as there
are only N CPUs available``): exit 125, a platform failure, retried twice, then the job fails with the
engine's words (shared/lifecycle/transitions.py: the same refusal in 3 attempts in a row).
"""

from __future__ import annotations

import json
import os

import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import job_config
from tests.infra import unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.mark.skipif((os.cpu_count() or 1) >= 32, reason="the engine starts a 32-CPU task on this machine")
async def test_a_task_the_engine_refuses_every_time_fails_the_job_after_three_attempts(api: PaiqClient,
                                                                                      user: str) -> None:
    name = unique("refused")
    config = job_config(name, command="true", roles=[
        {"name": "main", "taskNumber": 1, "cpuNumber": 32, "memoryMB": 128, "command": "true"}], retryCount=5)
    await api.submit(user, json.dumps(config).encode())
    detail, states = await wait_final(api, user, name, limit_s=60)
    status = detail["jobStatus"]
    assert status["state"] == "FAILED", (states, status)
    assert (status["appExitCode"], status["retries"]) == (125, 2)
    message = status["appExitTriggerMessage"]
    assert message.startswith("the task cannot start: the engine refused its container with the same error in 3 "
                              "attempts in a row, so it is not retried; "), message
    assert "as there are only" in message and "CPUs available" in message, "the engine's own words"
    assert [a["exitCode"] for a in status["attempts"]] == [125, 125]
