"""The runtime plugins' decisions in the container the launcher asks for: the command wrapped after the SSH
setup, the user's keys in ``authorized_keys``, the storages and clones bound (docker's create arguments)."""

from __future__ import annotations

from pathlib import Path

from services.launcher.container.gitclone import clones_folder
from services.launcher.container.spec import container_spec
from services.launcher.container.sshsetup import COMMAND_PREFIX
from services.launcher.engine.docker_driver import create_args
from shared.settings.model import LauncherSettings, Settings
from shared.tasks.plugins import Mount, TaskPlugins
from tests.unit.test_launcher_container import make_spec
from tests.unit.test_ssh_setup import KEY

PLUGINS = TaskPlugins(pre=("set -e", "echo pre"), post=("set -e", "echo post"), user_keys=("ssh-ed25519 AAAA me",),
                      mounts=(Mount(host_path="/mnt/nfs/team", container_path="/mnt/team", read_only=True),
                              Mount(host_path="/data/git/c1/0", container_path="/code")))


def test_the_command_is_wrapped_after_the_ssh_setup() -> None:
    spec = container_spec(make_spec(command="echo user"), name="c1", node_id="n1", code_dir="",
                          settings=LauncherSettings(), ssh=KEY, plugins=PLUGINS)
    assert spec.command.startswith(COMMAND_PREFIX + "set -e\necho pre\n")
    assert spec.command.index("echo user") < spec.command.index("echo post")


def test_the_users_keys_join_authorized_keys_and_the_mounts_are_bound() -> None:
    spec = container_spec(make_spec(), name="c1", node_id="n1", code_dir="", settings=LauncherSettings(), ssh=KEY,
                          plugins=PLUGINS)
    [authorized] = [f for f in spec.files if f.path.endswith("authorized_keys")]
    assert authorized.content.get_secret_value().decode().endswith("ssh-ed25519 AAAA me\n")
    mounts = create_args(spec)["mounts"]
    assert [(m["Source"], m["Target"], m["ReadOnly"], m["Type"]) for m in mounts] == [
        ("/mnt/nfs/team", "/mnt/team", True, "bind"), ("/data/git/c1/0", "/code", False, "bind")]


def test_no_plugins_no_change() -> None:
    spec = container_spec(make_spec(command="echo user"), name="c1", node_id="n1", code_dir="",
                          settings=LauncherSettings())
    assert spec.command == "echo user" and "mounts" not in create_args(spec)


def test_clones_live_under_the_default_file_system_else_the_data_directory(tmp_path: Path) -> None:
    local = Settings.from_env({"PAIQ_DATA_DIR": str(tmp_path), "PAIQ_DEFAULT_FS_URI": "file:///srv/fs"})
    assert clones_folder(local, "c1") == Path("/srv/fs/.paiq/git/c1")
    remote = Settings.from_env({"PAIQ_DATA_DIR": str(tmp_path), "PAIQ_DEFAULT_FS_URI": "hdfs://nn:9000"})
    assert clones_folder(remote, "c1") == tmp_path / "git" / "c1"
