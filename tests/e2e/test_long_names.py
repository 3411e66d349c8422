"""The longest names the protocol accepts run: a user name of 64 characters and a jobName of 255.

``<user>~<jobName>`` is then 320 bytes, past Linux's 255-byte limit on a file name: the job's key files
were named so, and every attempt ended 125 (``open /root/.ssh/...: file name too long``), retried
without end. The key name is now bounded (shared/tasks/filenames.py); the task finds its key under the name the
API gives, its ssh config points at it, and the job succeeds.
"""

from __future__ import annotations

import json

import pytest

from services.cli.client import PaiqClient
from shared.tasks.jobkeys import key_name
from tests.e2e.conftest import ALL_IN_ONE_ONLY, job_config, logged_in
from tests.infra import unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), ALL_IN_ONE_ONLY]  # the launcher's naming: one code

# The task lists its ssh files and checks that the key its ssh config names is there, whole, beside its .pub.
CHECK = ('cd /root/.ssh; for f in *; do echo "file: $f"; done; '
         'key=$(sed -n "s/^ *IdentityFile //p" config | head -1); echo "identity: $key"; '
         'test -s "$key" && test -s "$key.pub" && grep -qF "$(cut -d" " -f1-2 "$key.pub")" authorized_keys '
         '&& echo "key in place: $PAI_CONTAINER_ID"')


async def test_the_longest_user_and_job_names_run_to_success_with_their_key_in_place(admin: PaiqClient) -> None:
    prefix = unique("u")
    user = prefix + "x" * (64 - len(prefix))
    name = unique("j") + "-." * 60 + "y" * (255 - len(unique("j")) - 120)
    assert (len(user), len(name)) == (64, 255)
    api = await logged_in(admin, user)
    await api.submit(user, json.dumps(job_config(name, command=CHECK)).encode())
    detail, states = await wait_final(api, user, name, limit_s=90)
    status = detail["jobStatus"]
    assert status["state"] == "SUCCEEDED", (states, status.get("appExitCode"), status.get("appExitTriggerMessage"))
    assert status["retries"] == 0

    pair = (await api.ssh_info(user, name))["keyPair"]
    key = pair["privateKeyFileName"]
    assert key == key_name(user, name) and len(key.encode()) == 251 and key.startswith(f"{user}~")
    assert pair["publicKeyFileName"] == f"{key}.pub" and pair["privateKeyDirectDownloadLink"].endswith(key)
    log = "".join([line async for line in api.task_log(user, name, "main", 0)])
    assert f"file: {key}\n" in log and f"file: {key}.pub\n" in log, log
    assert f"identity: /root/.ssh/{key}\n" in log, log
    [container] = [line.split(": ", 1)[1] for line in log.splitlines() if line.startswith("key in place: ")]
    assert container.startswith("paiq-u") and len(container) <= 134, "PAI_CONTAINER_ID: the container's name"
    assert (await api.key_file(user, name, key)).startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
