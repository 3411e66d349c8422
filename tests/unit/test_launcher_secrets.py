"""A v2 task's sealed secrets and registry credentials, opened by the launcher at the last moment
(services/launcher/container/jobsecrets.py)."""

from __future__ import annotations

import pytest

from services.launcher.container.authfile import DOCKER_HUB
from services.launcher.container.jobsecrets import INLINE, command_to_run, registry_login
from services.launcher.engine.driver import ContainerSpec
from shared.admission.v2.checks import validate_v2_body
from shared.admission.validation import Accepted
from shared.errors import DriverError
from shared.jobconfig.model import JobConfig
from shared.jobconfig.sealing import new_key, seal_config
from shared.lifecycle import exitcodes
from tests.unit.factories import make_config

pytestmark = pytest.mark.unit

SECRET = "pa&ss 'w<o>rd'"
KEY = new_key()
BODY = """
protocolVersion: 2
name: regs
type: job
secrets: {token: "TOKEN", robot: {password: "PASSWORD"}}
prerequisites:
  - {name: own, type: dockerimage, uri: "registry.example:5000/team/a:1",
     auth: {username: robot, password: "<% $secrets.robot.password %>", registryuri: "registry.example:5000"}}
  - {name: hub, type: dockerimage, uri: "team/b:1", auth: {username: hubuser, password: hubpass}}
  - {name: open, type: dockerimage, uri: "local/busybox:latest"}
taskRoles:
  first:
    dockerImage: own
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: ["login --token '<% $secrets.token %>' --missing '<% $secrets.nope %>'"]
  again:
    dockerImage: own
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: ["true"]
  hub:
    dockerImage: hub
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: ["true"]
  plain:
    dockerImage: open
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: ["true"]
"""


def stored(body: str = BODY) -> JobConfig:
    result = validate_v2_body(body.replace("TOKEN", SECRET).replace("PASSWORD", SECRET))
    assert isinstance(result, Accepted), result
    return seal_config(result.config, KEY)


def test_the_stored_config_holds_no_secret() -> None:
    assert SECRET not in stored().model_dump_json()


def test_a_role_is_pulled_with_its_own_images_credentials_opened() -> None:
    auth = registry_login(stored(), "first", KEY)
    assert auth is not None
    assert (auth.server, auth.username, auth.password.get_secret_value(), auth.source) == (
        "registry.example:5000", "robot", SECRET, INLINE)
    assert SECRET not in repr(auth)


def test_a_role_on_the_jobs_image_gets_the_jobs_credentials_and_no_other_role_does() -> None:
    config = stored()
    assert registry_login(config, "again", KEY) == registry_login(config, "first", KEY)
    hub = registry_login(config, "hub", KEY)
    assert hub is not None and (hub.server, hub.username) == (DOCKER_HUB, "hubuser")
    assert registry_login(config, "plain", KEY) is None  # another image: the first role's login never goes along


def test_a_v1_job_has_no_inline_credentials_and_its_command_stays_as_written() -> None:
    config = make_config(command="echo '<% $secrets.x %>'")
    assert registry_login(config, "main", None) is None
    assert command_to_run(config, "echo '<% $secrets.x %>'", None) == "echo '<% $secrets.x %>'"


def test_the_command_run_has_the_secrets_rendered_as_written() -> None:
    config = stored()
    command = config.role("first").command
    assert SECRET not in command
    assert command_to_run(config, command, KEY) == f"login --token '{SECRET}' --missing ''"


@pytest.mark.parametrize("key", [None, new_key()], ids=["unset", "another-key"])
def test_secrets_that_cannot_be_opened_fail_the_task_naming_the_setting_not_the_value(key: str | None) -> None:
    config = stored()
    with pytest.raises(DriverError) as raised:
        command_to_run(config, config.role("first").command, key)
    assert raised.value.exit_code == exitcodes.CONFIG_ERROR and "PAIQ_SECRETS_KEY" in raised.value.reason
    with pytest.raises(DriverError) as pulled:
        registry_login(config, "first", key)
    assert pulled.value.exit_code == exitcodes.IMAGE_PULL_FAILED and "PAIQ_SECRETS_KEY" in pulled.value.reason
    assert SECRET not in raised.value.reason + pulled.value.reason


def test_a_container_specs_repr_hides_its_command() -> None:
    spec = ContainerSpec(name="n", image="i", command=f"echo {SECRET}", env={}, labels={}, cpus=1, memory_mb=1,
                         shm_mb=1)
    assert SECRET not in repr(spec) and SECRET not in str(spec)
