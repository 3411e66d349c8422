"""The paiq command's variables, read once from the mapping it is given: option, then variable, then the saved
login, then the default."""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path

import pytest

from services.cli import main as cli
from services.cli import options
from shared.settings.credentials import write_credentials

pytestmark = pytest.mark.unit

SAVED = {"api": "http://saved:1", "user": "saved-user", "token": "saved-token"}



def target(args: argparse.Namespace) -> tuple[str, str, str | None]:
    """Where the CLI's calls go and as whom: (api, user, token)."""
    return options.api_of(args), options.user_of(args), options.token_of(args)

def saved_login(tmp_path: Path) -> dict[str, str]:
    write_credentials(tmp_path / "credentials.json", **SAVED)
    return {"PAIQ_DATA_DIR": str(tmp_path)}


def test_without_variables_or_a_saved_login_the_defaults_hold(tmp_path: Path) -> None:
    args = cli.parse_args(["jobs"], {"PAIQ_DATA_DIR": str(tmp_path)})
    assert target(args) == (options.DEFAULT_API, getpass.getuser(), None)


def test_the_saved_login_is_found_in_the_data_dir(tmp_path: Path) -> None:
    args = cli.parse_args(["jobs"], saved_login(tmp_path))
    assert target(args) == ("http://saved:1", "saved-user", "saved-token")


def test_the_variables_come_before_the_saved_login(tmp_path: Path) -> None:
    env = {**saved_login(tmp_path), "PAIQ_API": "http://env:2", "PAIQ_USER": "env-user", "PAIQ_TOKEN": "env-token"}
    args = cli.parse_args(["jobs"], env)
    assert target(args) == ("http://env:2", "env-user", "env-token")


def test_the_options_come_before_the_variables(tmp_path: Path) -> None:
    env = {**saved_login(tmp_path), "PAIQ_API": "http://env:2", "PAIQ_USER": "env-user"}
    args = cli.parse_args(["--api", "http://opt:3", "--user", "opt-user", "jobs"], env)
    assert (options.api_of(args), options.user_of(args)) == ("http://opt:3", "opt-user")


def test_the_saved_token_is_sent_only_to_the_saved_server(tmp_path: Path) -> None:
    assert options.token_of(cli.parse_args(["jobs"], {**saved_login(tmp_path), "PAIQ_API": "http://other:4"})) is None


def test_empty_variables_are_unset(tmp_path: Path) -> None:
    env = {**saved_login(tmp_path), "PAIQ_API": "", "PAIQ_USER": "", "PAIQ_TOKEN": ""}
    args = cli.parse_args(["jobs"], env)
    assert target(args) == ("http://saved:1", "saved-user", "saved-token")


def test_the_process_environment_is_not_read_behind_the_callers_back(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIQ_API", "http://from-os-environ:5")
    monkeypatch.setenv("PAIQ_TOKEN", "from-os-environ")
    args = cli.parse_args(["jobs"], {"PAIQ_DATA_DIR": str(tmp_path)})
    assert (options.api_of(args), options.token_of(args)) == (options.DEFAULT_API, None)
