"""docker-compose.yml and k8s/ configure paiq with the same names, the ones shared/settings/model.py reads,
and take every secret from outside the repository."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.deploy.manifests import (
    COMPOSE,
    K8S,
    PAIQ_NAME,
    PAIQ_SERVICES,
    REPO,
    compose_config,
    compose_paiq_names,
    k8s_paiq_names,
    load_docs,
    settings_names,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRETS = {"RABBITMQ_DEFAULT_PASS": "rabbit-secret", "MONGO_INITDB_ROOT_PASSWORD": "mongo-secret",
           "PAIQ_ADMIN_PASSWORD": "admin-secret", "PAIQ_SECRETS_KEY": "sealing-key"}
USERS = {"RABBITMQ_DEFAULT_USER": "paiq", "MONGO_INITDB_ROOT_USERNAME": "paiq", "PAIQ_ADMIN_USER": "admin"}
SECRET_NAME = re.compile(r"PASS|PASSWORD|SECRET|TOKEN|COOKIE|KEYFILE")
DEPLOY_FILES = [COMPOSE, *sorted(K8S.glob("*.yaml")), K8S / "secrets.env.example",
                REPO / "examples" / "paiq.env.example", REPO / "tests" / "deploy" / "docker-compose.test.yml"]


def test_compose_and_k8s_give_each_service_the_same_settings() -> None:
    compose = compose_paiq_names({**USERS, **SECRETS})
    k8s = k8s_paiq_names(load_docs())
    assert sorted(k8s) == sorted(PAIQ_SERVICES)
    for service in PAIQ_SERVICES:
        assert {"PAIQ_AMQP_URL", "PAIQ_MONGODB_URI"} <= compose[service]
        assert compose[service] == k8s[service], (
            f"{service}: only in compose {sorted(compose[service] - k8s[service])}, "
            f"only in k8s {sorted(k8s[service] - compose[service])}")


def test_every_paiq_name_in_the_deployment_files_is_a_setting() -> None:
    known = settings_names()
    assert {"PAIQ_AMQP_URL", "PAIQ_MONGODB_URI", "PAIQ_NODE_GPUS"} <= known
    unknown = {f"{path.relative_to(REPO)}: {name}" for path in DEPLOY_FILES
               for name in PAIQ_NAME.findall(path.read_text()) if name not in known}
    assert unknown == set()


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_compose_refuses_to_start_without_each_secret(missing: str) -> None:
    env = {**USERS, **SECRETS}
    del env[missing]
    done = compose_config(env)
    assert done.returncode != 0
    assert f"set {missing} in the env file" in done.stderr


def test_compose_puts_the_given_secrets_where_they_belong() -> None:
    done = compose_config({**USERS, **SECRETS})
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    for name in ("submit", "scheduler", "status", "launcher", "notify"):
        env = services[name]["environment"]
        assert "paiq:rabbit-secret@" in env["PAIQ_AMQP_URL"]
        assert "paiq:mongo-secret@" in env["PAIQ_MONGODB_URI"]
    assert services["submit"]["environment"]["PAIQ_ADMIN_PASSWORD"] == "admin-secret"
    # the key that seals jobs' secrets and webhooks' keys: where they are sealed (submit) and opened (the
    # launcher, the notifier) alone
    assert sorted(n for n in services if services[n].get("environment", {}).get("PAIQ_SECRETS_KEY")) == [
        "launcher", "notify", "submit"]
    assert {services[n]["environment"]["PAIQ_SECRETS_KEY"] for n in ("submit", "launcher", "notify")} == {
        "sealing-key"}
    assert services["rabbitmq"]["environment"]["RABBITMQ_DEFAULT_PASS"] == "rabbit-secret"
    assert services["mongodb"]["environment"]["MONGO_INITDB_ROOT_PASSWORD"] == "mongo-secret"


def test_no_secret_is_committed() -> None:
    # The templates name the secrets and leave them empty.
    for template in (K8S / "secrets.env.example", REPO / "examples" / "paiq.env.example"):
        filled = [line for line in template.read_text().splitlines()
                  if re.match(r"^[A-Z_]+=.", line) and SECRET_NAME.search(line.split("=", 1)[0])]
        assert filled == [], f"{template.relative_to(REPO)} gives a secret a value"
    # Secrets reach the cluster only through the generator (from a git-ignored file), never a manifest.
    assert [str(d) for d in load_docs() if d.kind == "Secret"] == []
    # Compose takes every secret from a variable, in values and in URLs' user:password@.
    text = COMPOSE.read_text()
    for key, value in re.findall(r"^\s*([A-Z_]+):\s*(.+)$", text, flags=re.MULTILINE):
        if SECRET_NAME.search(key):
            assert value.startswith("${"), f"docker-compose.yml: {key} is not taken from the environment"
    for userinfo in re.findall(r"://([^/\s]*)@", text):
        assert re.fullmatch(r"(\$\{[^}]+\}):(\$\{[^}]+\})", userinfo), f"docker-compose.yml: {userinfo}"
    # And the real files are ignored by git.
    for real in ("paiq.env", "k8s/secrets.env"):
        assert subprocess.run(["git", "check-ignore", "-q", real], cwd=REPO, check=False).returncode == 0, real
