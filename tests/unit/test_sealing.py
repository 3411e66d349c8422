"""Secrets at rest (shared.jobconfig.sealing): sealed before storing, opened only with the key."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from services.platform import local_secrets_key, with_secrets_key
from shared.admission.v2.checks import validate_v2_body
from shared.admission.validation import Accepted
from shared.errors import SettingsError
from shared.jobconfig.model import JobConfig, RegistryAuth
from shared.jobconfig.sealing import (
    SEALED_KEY,
    SealedValueError,
    SealingError,
    SecretsKeyMissingError,
    is_sealed,
    key_problem,
    needs_key,
    new_key,
    open_registry_auth,
    open_secrets,
    seal_config,
)
from shared.settings.model import Settings

pytestmark = pytest.mark.timeout(30)

SECRET = "s3cr3t-Value-&-<x>"
BODY = f"""
protocolVersion: 2
name: sealed
type: job
parameters: {{epochs: 3}}
secrets: {{token: "{SECRET}", user: robot, list: [a, b]}}
prerequisites:
  - {{name: img, type: dockerimage, uri: "registry.example:5000/team/app:1",
     auth: {{username: "<% $secrets.user %>", password: "<% $secrets.token %>", registryuri: "registry.example:5000"}}}}
taskRoles:
  worker:
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0}}
    commands: ["echo <% $parameters.epochs %> <% $secrets.token %>"]
"""


def v2_config() -> JobConfig:
    result = validate_v2_body(BODY)
    assert isinstance(result, Accepted), result
    return result.config


def test_a_sealed_config_holds_no_secret_and_opens_to_the_submitted_values() -> None:
    key = new_key()
    config = v2_config()
    assert needs_key(config) and not is_sealed(config)
    sealed = seal_config(config, key)
    stored = json.dumps(sealed.model_dump(mode="json", by_alias=True))
    assert SECRET not in stored and "robot" not in stored
    assert set(sealed.secrets) == {SEALED_KEY} and is_sealed(sealed)
    assert open_secrets(sealed, key) == config.secrets
    for auth in (sealed.registry_auth, sealed.task_roles[0].registry_auth):
        assert auth is not None and auth.registry_uri == "registry.example:5000"
        assert open_registry_auth(auth, key) == RegistryAuth(username="robot", password=SECRET,
                                                            registry_uri="registry.example:5000")
    # the command keeps its reference; the secret goes in only when a task starts
    assert "<% $secrets.token %>" in sealed.task_roles[0].command


def test_a_job_without_secrets_needs_no_key_and_is_unchanged() -> None:
    config = JobConfig.model_validate({"jobName": "j", "image": "busybox",
                                       "taskRoles": [{"name": "a", "command": "true"}]})
    assert not needs_key(config)
    assert seal_config(config, None) is config
    assert open_secrets(config, None) == {}
    assert open_registry_auth(None, None) is None


def test_without_a_key_a_job_with_secrets_is_refused_naming_the_setting() -> None:
    with pytest.raises(SecretsKeyMissingError, match="PAIQ_SECRETS_KEY"):
        seal_config(v2_config(), None)
    sealed = seal_config(v2_config(), new_key())
    with pytest.raises(SecretsKeyMissingError, match="PAIQ_SECRETS_KEY"):
        open_secrets(sealed, None)
    with pytest.raises(SealingError, match="PAIQ_SECRETS_KEY"):
        open_registry_auth(sealed.registry_auth, "")


def test_another_key_cannot_open_and_a_rotated_key_still_can() -> None:
    old, new = new_key(), new_key()
    sealed = seal_config(v2_config(), old)
    with pytest.raises(SealedValueError):
        open_secrets(sealed, new)
    with pytest.raises(SealedValueError):
        open_registry_auth(sealed.registry_auth, new)
    assert open_secrets(sealed, f"{new},{old}")["token"] == SECRET
    resealed = seal_config(v2_config(), f"{new},{old}")
    with pytest.raises(SealedValueError):
        open_secrets(resealed, old)  # the first key seals


def test_unsealed_secrets_in_a_stored_config_are_an_error() -> None:
    with pytest.raises(SealingError, match="not sealed"):
        open_secrets(v2_config(), new_key())


@pytest.mark.parametrize("text", ["", "short", "x" * 44, new_key() + ",nope"],
                         ids=["empty", "short", "44-letters", "a-key-then-nope"])
def test_a_malformed_key_is_named(text: str) -> None:
    assert key_problem(text) is not None


def test_the_setting_is_checked_and_never_shown() -> None:
    key = new_key()
    settings = Settings.from_env({"PAIQ_SECRETS_KEY": key})
    assert settings.secrets_key == key and key not in repr(settings)
    with pytest.raises(SettingsError, match="PAIQ_SECRETS_KEY must be a Fernet key"):
        Settings.from_env({"PAIQ_SECRETS_KEY": "not-a-key"})


def test_paiq_up_makes_its_key_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    key = local_secrets_key(tmp_path / "data")
    path = tmp_path / "data" / "secrets.key"
    assert key_problem(key) is None and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert local_secrets_key(tmp_path / "data") == key
    settings = with_secrets_key(Settings.from_env({"PAIQ_DATA_DIR": str(tmp_path / "data")}))
    assert settings.secrets_key == key
    chosen = new_key()
    assert with_secrets_key(Settings.from_env({"PAIQ_SECRETS_KEY": chosen})).secrets_key == chosen
    path.write_text("garbage\n")
    with pytest.raises(ValueError, match="PAIQ_SECRETS_KEY"):
        local_secrets_key(tmp_path / "data")
