"""Both deployments hand the submit service and the launchers the operator's storage config
(PAIQ_STORAGE_CONFIG, shared/storageconfig.py): compose binds examples/storage-config.yaml (or
STORAGE_CONFIG_FILE), Kubernetes mounts the ConfigMap paiq-storage-config, and that text is paiq's own."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
import yaml

from shared.storageconfig import load_storage_configs, parse_storage_configs
from tests.deploy.manifests import (
    K8S,
    REPO,
    component,
    compose_config,
    config_maps,
    containers,
    kustomization,
    load_docs,
    pod_spec,
    workloads,
)
from tests.deploy.test_config_names import SECRETS, USERS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

EXAMPLE = REPO / "examples" / "storage-config.yaml"
READERS = ("submit", "launcher")  # the services that read it (docs, teamwise_storage)


def test_the_example_is_a_storage_config_paiq_reads() -> None:
    configs = load_storage_configs(str(EXAMPLE))
    assert [s.name for s in configs.storages] == ["team-shared", "datasets"]
    assert all(PurePosixPath(s.host_path).is_relative_to("/var/lib/paiq/fs") for s in configs.storages), \
        "under the default file system, which every node shares"


def test_compose_binds_it_into_submit_and_the_launcher_and_names_it() -> None:
    done = compose_config({**USERS, **SECRETS})
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    for name, service in services.items():
        path = (service.get("environment") or {}).get("PAIQ_STORAGE_CONFIG")
        if name not in READERS:
            assert path is None, f"{name} does not read the storage config"
            continue
        assert path == "/etc/paiq/storage/storage-config.yaml"
        assert f"{EXAMPLE}:{path}:ro" in service["volumes"], service["volumes"]
    other = compose_config({**USERS, **SECRETS, "STORAGE_CONFIG_FILE": "/srv/paiq/storages.yaml"})
    assert "/srv/paiq/storages.yaml:/etc/paiq/storage/storage-config.yaml:ro" in \
        yaml.safe_load(other.stdout)["services"]["launcher"]["volumes"], "an operator's own file"


def test_kubernetes_mounts_the_config_map_into_submit_and_the_launchers_and_names_it() -> None:
    docs = load_docs()
    assert "storage-config.yaml" in kustomization()["resources"]
    text = config_maps(docs)["paiq-storage-config"]["storage-config.yaml"]
    assert parse_storage_configs(text) == load_storage_configs(str(EXAMPLE)) and text == EXAMPLE.read_text(), \
        "k8s/storage-config.yaml holds examples/storage-config.yaml"
    readers = {component(d): d for d in workloads(docs) if component(d) in READERS}
    assert sorted(readers) == sorted(READERS)
    for name, doc in readers.items():
        [container] = containers(doc)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PAIQ_STORAGE_CONFIG"] == "/etc/paiq/storage/storage-config.yaml", name
        [volume] = [v for v in pod_spec(doc)["volumes"] if v.get("configMap", {}).get("name") == "paiq-storage-config"]
        mounts = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mounts == [{"name": volume["name"], "mountPath": "/etc/paiq/storage", "readOnly": True}], name
    assert (K8S / "storage-config.yaml").exists()
