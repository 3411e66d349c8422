"""Reading k8s/ and docker-compose.yml: documents, workloads, containers and the variables they get."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
COMPOSE = REPO / "docker-compose.yml"
SETTINGS = REPO / "shared" / "settings" / "model.py"
PAIQ_SERVICES = ("submit", "scheduler", "status", "launcher", "notify")
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet"}
PAIQ_NAME = re.compile(r"\bPAIQ_[A-Z0-9_]+\b")


@dataclass(frozen=True)
class Doc:
    path: Path
    index: int
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind"))

    @property
    def name(self) -> str:
        return str(self.body.get("metadata", {}).get("name"))

    def __str__(self) -> str:
        return f"{self.path.name}[{self.index}] {self.kind}/{self.name}"


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def load_docs(paths: list[Path] | None = None) -> list[Doc]:
    docs = []
    for path in paths or manifest_files():
        for index, body in enumerate(yaml.safe_load_all(path.read_text())):
            if body is not None:
                docs.append(Doc(path, index, body))
    return docs


def kustomization() -> dict[str, Any]:
    return dict(yaml.safe_load((K8S / "kustomization.yaml").read_text()))


def pod_spec(doc: Doc) -> dict[str, Any]:
    return dict(doc.body["spec"]["template"]["spec"])


def containers(doc: Doc, *, init: bool = False) -> Iterator[dict[str, Any]]:
    spec = pod_spec(doc)
    yield from spec.get("initContainers", []) if init else []
    yield from spec["containers"]


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d.kind in WORKLOAD_KINDS]


def component(doc: Doc) -> str:
    return str(doc.body["metadata"].get("labels", {}).get("app.kubernetes.io/component", doc.name))


def config_maps(docs: list[Doc]) -> dict[str, dict[str, str]]:
    return {d.name: dict(d.body.get("data", {})) for d in docs if d.kind == "ConfigMap"}


def container_env_names(container: dict[str, Any], maps: dict[str, dict[str, str]]) -> list[str]:
    """What a container's environment is made of, in order: envFrom ConfigMaps' keys, then env."""
    names = [key for source in container.get("envFrom", []) if "configMapRef" in source
             for key in maps[source["configMapRef"]["name"]]]
    return names + [e["name"] for e in container.get("env", [])]


def k8s_paiq_names(docs: list[Doc]) -> dict[str, set[str]]:
    """PAIQ_* variables each paiq service gets on Kubernetes."""
    maps = config_maps(docs)
    out: dict[str, set[str]] = {}
    for doc in workloads(docs):
        if component(doc) in PAIQ_SERVICES:
            [container] = containers(doc)
            out[component(doc)] = {n for n in container_env_names(container, maps) if n.startswith("PAIQ_")}
    return out


def compose_config(env: dict[str, str], *files: Path) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` (Debian's docker-compose) with exactly ``env`` as the variables it sees."""
    clean = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "DOCKER_HOST"}}
    file_args = [arg for f in (files or (COMPOSE,)) for arg in ("-f", str(f))]
    with tempfile.NamedTemporaryFile(suffix=".env") as empty:  # so that no .env lying around is read
        cmd = ["docker-compose", "--project-directory", str(REPO), *file_args, "--env-file", empty.name, "config"]
        return subprocess.run(cmd, cwd=REPO, env={**clean, **env}, capture_output=True, text=True, timeout=60,
                              check=False)


def compose_paiq_names(env: dict[str, str]) -> dict[str, set[str]]:
    """PAIQ_* variables each paiq service gets from docker-compose.yml, as docker-compose resolves it."""
    done = compose_config(env)
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    return {name: {k for k in (services[name].get("environment") or {}) if k.startswith("PAIQ_")}
            for name in PAIQ_SERVICES}


def settings_names() -> set[str]:
    """Every PAIQ_* name shared/settings/model.py reads."""
    return set(PAIQ_NAME.findall(SETTINGS.read_text()))
