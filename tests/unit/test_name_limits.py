"""Every name made from job and user names fits the kernel's and the engine's limits, for the longest
names the protocol accepts; names that fit already are kept as they were."""

from __future__ import annotations

import shlex

import pytest
from pydantic import SecretStr

from services.launcher.container.sshsetup import ssh_files, ssh_script
from services.submit.users import check_user_name
from shared.admission.validation import Accepted, validate_job_config
from shared.records import new_job_id
from shared.tasks.filenames import NAME_MAX, fitted
from shared.tasks.jobkeys import KEY_NAME_MAX, JobKey, key_name
from shared.tasks.launchspec import container_name

pytestmark = pytest.mark.unit

LONGEST_USER = "u" * 64
LONGEST_JOB = "j" * 255
LONGEST_ROLE = "r" * 64


def test_the_longest_names_are_the_validators_maxima() -> None:
    assert check_user_name(LONGEST_USER) == LONGEST_USER
    with pytest.raises(Exception, match="1-64"):
        check_user_name(LONGEST_USER + "u")
    for name, role, ok in ((LONGEST_JOB, LONGEST_ROLE, True), (LONGEST_JOB + "j", "main", False),
                           ("job", LONGEST_ROLE + "r", False)):
        result = validate_job_config({"jobName": name, "image": "busybox",
                                      "taskRoles": [{"name": role, "command": "true"}]})
        assert isinstance(result, Accepted) is ok, (len(name), len(role))


@pytest.mark.parametrize("name", ["alice~job1", "a" * 251, "é" * 125 + "a"])
def test_a_name_that_fits_is_kept(name: str) -> None:
    assert fitted(name, 251) == name


@pytest.mark.parametrize(("name", "limit"), [
    ("a" * 252, 251),
    ("u" * 64 + "~" + "j" * 255, 251),
    ("é" * 200, 251),  # 400 bytes: cut between two characters, never inside one
    ("日本語" * 40, 255),
    ("a" * 250 + "é" * 3, 251),
])
def test_a_longer_name_is_its_beginning_and_a_digest(name: str, limit: int) -> None:
    short = fitted(name, limit)
    assert len(short.encode()) <= limit and short.encode().decode() == short
    head, _, digest = short.rpartition("-")
    assert name.startswith(head) and len(digest) == 8 and len(short.encode()) >= limit - 3 - 9
    assert fitted(name, limit) == short, "the same every time"
    assert fitted(name[:-1] + "z", limit) != short, "names sharing their beginning differ"


def test_key_files_of_the_longest_names_fit_a_file_name() -> None:
    name = key_name(LONGEST_USER, LONGEST_JOB)
    assert len(name.encode()) == KEY_NAME_MAX == 251 and len(f"{name}.pub".encode()) == NAME_MAX
    assert name.startswith(f"{LONGEST_USER}~jjj"), "readable: the user, then the job's name"
    key = JobKey(job_id=new_job_id(LONGEST_USER, LONGEST_JOB), user=LONGEST_USER, job_name=LONGEST_JOB,
                 private_key=SecretStr("-----BEGIN OPENSSH PRIVATE KEY-----\n"), public_key="ssh-ed25519 AAAA")
    assert key.name == name
    for f in ssh_files(key):
        assert all(len(part.encode()) <= NAME_MAX for part in f.path.split("/")), f.path
    assert {f.path for f in ssh_files(key)} >= {f"/root/.ssh/{name}", f"/root/.ssh/{name}.pub"}
    assert f"key_name={shlex.quote(name)}\n" in ssh_script(key), "the ssh config names the file the task has"


@pytest.mark.parametrize(("user", "job", "expected"), [
    ("alice", "job1", "alice~job1"),
    (LONGEST_USER, "j" * 186, f"{LONGEST_USER}~{'j' * 186}"),  # 251 bytes: unchanged
])
def test_key_names_that_fit_are_openpais(user: str, job: str, expected: str) -> None:
    assert key_name(user, job) == expected


def test_container_names_of_the_longest_names_fit_the_engine() -> None:
    job_id = new_job_id(LONGEST_USER, LONGEST_JOB)
    name = container_name(job_id, 1000, LONGEST_ROLE, 4999)
    assert len(name.encode()) <= 134 < NAME_MAX, name
    assert name != container_name(job_id, 1001, LONGEST_ROLE, 4999) != container_name(job_id, 1000, LONGEST_ROLE, 4998)
    assert container_name("alice~job1~0a1b2c3d", 0, "main", 0).startswith("paiq-alice-job1-0a1b2c3d-0-main-0-")
