"""OpenPAI's runtime plugins as paiq decides them per task (shared.tasks.plugins); the wrapped command is run
by /bin/sh here to show the order and the exit codes."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from shared.storageconfig import parse_storage_configs
from shared.tasks.plugins import (
    PLUGIN_KEY,
    PluginRefError,
    TaskPlugins,
    plugin_warnings,
    task_plugins,
    teamwise_storage_names,
    tensorboard_address,
    with_prerequisite_plugins,
    wrapped_command,
)

STORAGES = parse_storage_configs("""
storages:
  - {name: team, hostPath: /mnt/nfs/team, mountPath: /mnt/team, default: true}
  - {name: ro, hostPath: /data/ro, mountPath: /mnt/ro, readOnly: true}
""")


def extras(*entries: dict[str, Any]) -> dict[str, Any]:
    return {PLUGIN_KEY: list(entries)}


def plugins_of(ex: dict[str, Any], role: str = "worker", index: int = 0) -> TaskPlugins:
    return task_plugins(ex, role, index, first_role="worker", user="alice", storages=STORAGES)


def run(script: str) -> tuple[int, str]:
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=10, check=False)
    return done.returncode, done.stdout


def test_no_plugins_leave_the_command_alone() -> None:
    assert plugins_of({}).empty
    assert wrapped_command("echo hi", plugins_of({})) == "echo hi"


def test_cmd_runs_pre_then_user_then_post_in_order() -> None:
    p = plugins_of(extras({"plugin": "cmd", "parameters": {"preCommands": ["echo pre1", "echo pre2"],
                                                           "postCommands": ["echo post"]}}))
    assert run(wrapped_command("echo user; exit 0", p)) == (0, "pre1\npre2\nuser\npost\n")


def test_a_failing_pre_command_fails_the_task_with_its_code() -> None:
    p = plugins_of(extras({"plugin": "cmd", "parameters": {"preCommands": ["echo pre", "sh -c 'exit 7'",
                                                                           "echo never"]}}))
    assert run(wrapped_command("echo user", p)) == (7, "pre\n")


def test_failure_policy_ignore_goes_on() -> None:
    p = plugins_of(extras({"plugin": "cmd", "failurePolicy": "ignore", "parameters": {"preCommands": ["false"]}}))
    assert run(wrapped_command("echo user", p)) == (0, "user\n")


def test_post_commands_only_after_success_and_the_users_code_kept() -> None:
    p = plugins_of(extras({"plugin": "cmd", "parameters": {"postCommands": ["echo post"]}}))
    assert run(wrapped_command("echo user; exit 3", p)) == (3, "user\n")
    failing_post = plugins_of(extras({"plugin": "cmd", "parameters": {"postCommands": ["exit 5"]}}))
    assert run(wrapped_command("true", failing_post))[0] == 5


def test_cmd_callbacks() -> None:
    p = plugins_of(extras({"plugin": "cmd", "parameters": {"callbacks": [
        {"event": "taskStarts", "commands": ["echo start"]}, {"event": "taskSucceeds", "commands": ["echo ok"]}]}}))
    assert run(wrapped_command("echo user", p)) == (0, "start\nuser\nok\n")


def test_taskroles_limit_a_plugin() -> None:
    ex = extras({"plugin": "cmd", "taskroles": ["ps"], "parameters": {"preCommands": ["echo pre"]}})
    assert plugins_of(ex, "worker").empty
    assert plugins_of(ex, "ps").pre


def test_ssh_userssh_keys_and_barrier() -> None:
    p = plugins_of(extras({"plugin": "ssh", "parameters": {
        "jobssh": True, "userssh": {"type": "custom", "value": "ssh-ed25519 AAAA alice@x"}, "sshbarrier": True}}))
    assert p.user_keys == ("ssh-ed25519 AAAA alice@x",)
    assert any("ssh barrier" in line for line in p.pre)
    assert not plugins_of(extras({"plugin": "ssh", "parameters": {"jobssh": True}})).pre


def test_git_clones_before_the_commands() -> None:
    p = plugins_of(extras({"plugin": "git", "parameters": {"repo_uri": "file:///srv/repo.git", "clone_dir": "/w",
                                                           "options": ["--branch=dev"]}}))
    [clone] = p.clones
    assert clone.target == "/w" and clone.argv("/h") == ["git", "clone", "--branch=dev", "--", "file:///srv/repo.git",
                                                         "/h"]
    [default] = plugins_of(extras({"plugin": "git", "parameters": {"repo_uri": "u"}})).clones
    assert default.target == "/usr/local/pai/code"
    missing = plugins_of(extras({"plugin": "git", "parameters": {}}))
    assert run(wrapped_command("echo user", missing))[0] == 1


def test_tensorboard_only_in_the_first_roles_first_task() -> None:
    ex = extras({"plugin": "tensorboard", "parameters": {"logdir": {"a": "/logs"}}})
    assert any("PAI_PORT_LIST_worker_0_tensorboard" in line for line in plugins_of(ex).pre)
    assert plugins_of(ex, index=1).empty
    assert tensorboard_address(ex, ("10.0.0.1", {"tensorboard": [20001]})) == "http://10.0.0.1:20001"
    assert tensorboard_address({}, ("10.0.0.1", {"tensorboard": [20001]})) is None


def test_teamwise_storage_mounts_the_named_or_default_storages() -> None:
    named = plugins_of(extras({"plugin": "teamwise_storage", "parameters": {"storageConfigNames": ["ro"]}}))
    assert [(m.host_path, m.container_path, m.read_only) for m in named.mounts] == [("/data/ro", "/mnt/ro", True)]
    default = plugins_of(extras({"plugin": "teamwise_storage"}))
    assert [m.container_path for m in default.mounts] == ["/mnt/team"]
    assert teamwise_storage_names(extras({"plugin": "teamwise_storage",
                                          "parameters": {"storageConfigNames": ["ro", "x"]}})) == ("ro", "x")


@pytest.mark.parametrize(("ex", "count"), [
    (extras({"plugin": "cmd"}, {"plugin": "ssh"}), 0),
    (extras({"plugin": "nni"}, {"plugin": "cmd"}, {"plugin": "other"}), 2),
    ({}, 0),
    ({PLUGIN_KEY: "not a list"}, 0),
])
def test_unknown_plugins_are_warned_about(ex: dict[str, Any], count: int) -> None:
    warnings = plugin_warnings(ex)
    assert len(warnings) == count
    assert all("is not supported by paiq" in w for w in warnings)


def test_prerequisite_plugins_run_in_the_roles_naming_them_before_the_extras_list() -> None:
    document = {
        "prerequisites": [
            {"name": "setup", "type": "script", "plugin": f"{PLUGIN_KEY}.cmd", "failurePolicy": "ignore",
             "preCommands": ["echo from-prerequisite"]},
            {"name": "plain", "type": "script", "plugin": "something.else"},
        ],
        "taskRoles": {"worker": {"prerequisites": ["setup"]}, "ps": {}},
    }
    ex = with_prerequisite_plugins(extras({"plugin": "cmd", "parameters": {"preCommands": ["echo extras"]}}),
                                   document)
    assert [u["plugin"] for u in ex[PLUGIN_KEY]] == ["cmd", "cmd"]
    assert ex[PLUGIN_KEY][0] == {"plugin": "cmd", "taskroles": ["worker"], "failurePolicy": "ignore",
                                 "parameters": {"name": "setup", "preCommands": ["echo from-prerequisite"]}}
    assert run(wrapped_command("echo user", plugins_of(ex, "worker"))) == (0, "from-prerequisite\nextras\nuser\n")
    assert run(wrapped_command("echo user", plugins_of(ex, "ps"))) == (0, "extras\nuser\n")
    assert with_prerequisite_plugins({}, {"taskRoles": {}}) == {}


def test_parameters_and_secrets_referenced_in_plugin_parameters_are_rendered() -> None:
    ex = extras({"plugin": "cmd", "parameters": {"preCommands": ["echo <% $parameters.greeting %>-<% $secrets.k %>",
                                                                 "echo <% $parameters.list[1] %>"]}})
    refs = {"parameters": {"greeting": "hi", "list": [1, 2]}, "secrets": {"k": "s-x"}}
    p = task_plugins(ex, "worker", 0, first_role="worker", user="alice", storages=STORAGES, refs=refs)
    assert run(wrapped_command("true", p)) == (0, "hi-s-x\n2\n")
    with pytest.raises(PluginRefError, match=r"<% \$parameters.nope %> names nothing"):
        task_plugins(extras({"plugin": "cmd", "parameters": {"preCommands": ["echo <% $parameters.nope %>"]}}),
                     "worker", 0, first_role="worker", user="alice", storages=STORAGES, refs=refs)


def test_post_commands_of_later_plugins_run_first_as_openpais_post_scripts() -> None:
    p = plugins_of(extras({"plugin": "cmd", "parameters": {"preCommands": ["echo pre-a"], "postCommands": ["echo a"]}},
                          {"plugin": "cmd", "parameters": {"preCommands": ["echo pre-b"], "postCommands": ["echo b"]}}))
    assert run(wrapped_command("echo user", p)) == (0, "pre-a\npre-b\nuser\nb\na\n")
