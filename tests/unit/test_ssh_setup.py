"""SSH into tasks, the pure parts: the user's keys, the job's key record, the container's files and command."""

from __future__ import annotations

import io
import tarfile

import pytest
from pydantic import SecretStr

from services.launcher.container.spec import DEBUG_WRAPPER, container_spec
from services.launcher.container.sshsetup import COMMAND_PREFIX, SCRIPT, SSHD_PATHS, ssh_files, ssh_script
from services.launcher.engine.docker_driver import create_args, files_archive
from shared.jobconfig.sealing import new_key
from shared.settings.model import LauncherSettings
from shared.tasks.jobkeys import MAX_USER_KEYS, JobKey, StoredJobKey, key_name, user_keys
from tests.unit.test_launcher_container import make_spec

pytestmark = pytest.mark.unit

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0ItmHHbc0aq0D9PLnIDpvEv9cYxVnXcsHy7yBrq+nA"
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7=="
KEY = JobKey(job_id="alice~job1~0a1b2c3d", user="alice", job_name="job1",
             private_key=SecretStr("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n-----END OPENSSH PRIVATE KEY-----\n"),
             public_key=f"{ED} paiq:alice~job1", user_keys=(RSA,), created_ms=5)


@pytest.mark.parametrize(("text", "expected"), [
    (ED, (ED,)),
    (f"{ED} me@laptop\n", (f"{ED} me@laptop",)),
    (f"{ED}\r\n\n  {RSA} two words  \n", (ED, f"{RSA} two words")),
    ("ecdsa-sha2-nistp256 AAAAE2VjZHNh me", ("ecdsa-sha2-nistp256 AAAAE2VjZHNh me",)),
    ("sk-ssh-ed25519@openssh.com AAAAGnNr", ("sk-ssh-ed25519@openssh.com AAAAGnNr",)),
])
def test_user_keys_accepted(text: str, expected: tuple[str, ...]) -> None:
    assert user_keys(text) == expected


@pytest.mark.parametrize(("text", "problem"), [
    ("", "must hold at least one OpenSSH public key"),
    ("  \n ", "must hold at least one OpenSSH public key"),
    (f'command="sh" {ED}', "line 1 is not an OpenSSH public key"),  # options would change what a login may do
    (f"{ED}\nssh-ed25519", "line 2 is not an OpenSSH public key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----", "line 1 is not an OpenSSH public key"),
    ("ssh-foo AAAA", "line 1 is not an OpenSSH public key"),
    ("\n".join([ED] * (MAX_USER_KEYS + 1)), f"must hold at most {MAX_USER_KEYS} public keys, got {MAX_USER_KEYS + 1}"),
])
def test_user_keys_refused(text: str, problem: str) -> None:
    found = user_keys(text)
    assert isinstance(found, str) and found.startswith(problem), found


def test_the_key_record_round_trips_sealed_and_never_shows_its_private_key() -> None:
    sealing = new_key()
    doc = KEY.to_document(sealing)
    assert StoredJobKey.from_document(doc).opened(sealing) == KEY
    assert KEY.name == key_name("alice", "job1") == "alice~job1"
    assert "secret" not in repr(KEY) and "secret" not in str(KEY) and "secret" not in repr(doc)
    assert KEY.authorized_keys == f"{ED} paiq:alice~job1\n{RSA}\n"
    assert set(doc) == {"_id", "user", "job_name", "sealed_private_key", "public_key", "user_keys", "created_ms"}


def test_the_containers_files_and_their_modes() -> None:
    files = {f.path: f for f in ssh_files(KEY)}
    assert {p: f.mode for p, f in files.items()} == {
        "/root/.ssh/alice~job1": 0o600, "/root/.ssh/alice~job1.pub": 0o644, "/root/.ssh/authorized_keys": 0o600,
        SCRIPT: 0o755}
    assert files["/root/.ssh/alice~job1"].content.get_secret_value() == KEY.private_key.get_secret_value().encode()
    assert files["/root/.ssh/authorized_keys"].content.get_secret_value() == KEY.authorized_keys.encode()
    assert "secret" not in repr(files["/root/.ssh/alice~job1"])
    assert "key_name='alice~job1'" in ssh_script(KEY)


def test_the_archive_holds_the_files_under_their_directories() -> None:
    with tarfile.open(fileobj=io.BytesIO(files_archive(ssh_files(KEY)))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert {n: (m.isdir(), oct(m.mode)) for n, m in members.items() if m.isdir()} == {
            "root": (True, "0o700"), "root/.ssh": (True, "0o700"), "pai": (True, "0o755"),
            "pai/bootstrap": (True, "0o755")}
        key = tar.extractfile("root/.ssh/alice~job1")
        assert key is not None and key.read() == KEY.private_key.get_secret_value().encode()
        assert (members["root/.ssh/alice~job1"].uid, members["root/.ssh/alice~job1"].mode) == (0, 0o600)


def test_a_job_with_a_key_pair_starts_sshd_before_its_command() -> None:
    spec = container_spec(make_spec(), name="c1", node_id="n1", code_dir="", settings=LauncherSettings(), ssh=KEY)
    assert create_args(spec)["command"] == [COMMAND_PREFIX + "python train.py"]
    assert [f.path for f in spec.files] == [f.path for f in ssh_files(KEY)]
    assert COMMAND_PREFIX == "/bin/sh /pai/bootstrap/paiq-ssh.sh </dev/null || true\n"
    # a job of an older paiq, without a key pair: its command as before, no files
    plain = container_spec(make_spec(), name="c1", node_id="n1", code_dir="", settings=LauncherSettings())
    assert create_args(plain)["command"] == ["python train.py"] and plain.files == ()


def test_an_isdebug_task_with_a_key_pair_keeps_the_wrapper_around_the_ssh_setup() -> None:
    spec = container_spec(make_spec(is_debug=True), name="c1", node_id="n1", code_dir="",
                          settings=LauncherSettings.from_env({"PAIQ_DEBUG_KEEP_SECONDS": "60"}), ssh=KEY)
    assert create_args(spec)["command"] == [DEBUG_WRAPPER, "paiq-debug", COMMAND_PREFIX + "python train.py", "60"]


def test_the_script_looks_for_sshd_where_the_launcher_does() -> None:
    script = ssh_script(KEY)
    assert f"for candidate in {' '.join(SSHD_PATHS)}; do" in script
    assert "[ -n \"$sshd\" ] || exit 0" in script  # silent: the task's log is the user's
