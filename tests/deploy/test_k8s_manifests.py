"""k8s/ validated offline against the Kubernetes API schemas (kubernetes-validate ships them), strictly
(unknown fields are errors), plus what the schemas cannot see: the kustomization lists every file,
references resolve, selectors select, every container has probes and resources."""

from __future__ import annotations

import copy
import re
import subprocess
from typing import Any

import pytest
from kubernetes_validate import utils as kv

from tests.deploy.manifests import (
    K8S,
    REPO,
    Doc,
    config_maps,
    container_env_names,
    containers,
    kustomization,
    load_docs,
    manifest_files,
    pod_spec,
    workloads,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# The oldest Kubernetes the manifests are meant for, and the newest the schemas know.
KUBERNETES_VERSIONS = ("1.29.0", kv.latest_version())


def schema_errors(doc: dict[str, Any], version: str) -> list[str]:
    """Why ``doc`` is not a valid object of Kubernetes ``version``; nothing when it is."""
    try:
        kv.validate(doc, version, strict=True)
    except kv.ValidationError as e:
        return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"]
    except kv.SchemaNotFoundError as e:
        return [e.message]
    return []


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return load_docs()


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(docs: list[Doc], version: str) -> None:
    kinds = {d.kind for d in docs}
    assert {"Namespace", "ConfigMap", "ServiceAccount", "Deployment", "Service", "Ingress", "DaemonSet",
            "StatefulSet", "PodDisruptionBudget"} <= kinds
    errors = {str(d): e for d in docs if (e := schema_errors(d.body, version))}
    assert errors == {}


def _submit_deployment() -> dict[str, Any]:
    [doc] = [d for d in load_docs([K8S / "submit.yaml"]) if d.kind == "Deployment"]
    return copy.deepcopy(doc.body)


def _set(path: str, value: object) -> Any:
    def breaks(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = body
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return breaks


@pytest.mark.parametrize(("breakage", "expected"), [
    (_set("spec.replicas", "two"), "is not of type 'integer'"),
    (_set("spec.template.spec.containers.0.livenessProbes", {}), "Additional properties are not allowed"),
    (_set("spec.template.spec.containers.0.name", KeyError), "'name' is a required property"),
    (_set("spec.template.spec.containers.0.ports.0.containerPort", "http"), "is not of type 'integer'"),
    (_set("apiVersion", "extensions/v1beta1"), "Couldn't find schema for kind Deployment"),
], ids=["replicas-as-string", "misspelt-field", "container-without-name", "port-as-name", "removed-api"])
def test_a_broken_manifest_fails_validation(breakage: Any, expected: str) -> None:
    deployment = _submit_deployment()
    assert schema_errors(deployment, KUBERNETES_VERSIONS[-1]) == [], "the unbroken manifest must pass"
    breakage(deployment)
    errors = schema_errors(deployment, KUBERNETES_VERSIONS[-1])
    assert errors, "the broken manifest passed validation"
    assert expected in errors[0]


def test_the_kustomization_lists_every_manifest_and_makes_the_secret_from_an_uncommitted_file() -> None:
    k = kustomization()
    assert sorted(k["resources"]) == sorted(p.name for p in manifest_files())
    [generator] = k["secretGenerator"]
    assert generator["name"] == "paiq-secrets"
    [env_file] = generator["envs"]
    ignored = subprocess.run(["git", "check-ignore", "-q", f"k8s/{env_file}"], cwd=REPO, check=False)
    assert ignored.returncode == 0, f"k8s/{env_file} holds the passwords: it must be git-ignored"
    assert (K8S / f"{env_file}.example").is_file()


def _secret_keys_used(docs: list[Doc]) -> set[str]:
    used = set()
    for doc in workloads(docs):
        for c in containers(doc, init=True):
            used |= {e["valueFrom"]["secretKeyRef"]["key"] for e in c.get("env", [])
                     if "secretKeyRef" in e.get("valueFrom", {})}
        for volume in pod_spec(doc).get("volumes", []):
            used |= {item["key"] for item in volume.get("secret", {}).get("items", [])}
    return used


def test_every_secret_key_used_is_in_the_template_and_every_template_key_is_used(docs: list[Doc]) -> None:
    template = (K8S / "secrets.env.example").read_text()
    keys = {line.split("=", 1)[0] for line in template.splitlines() if re.match(r"^[A-Z_]+=", line)}
    assert _secret_keys_used(docs) == keys


def _unresolved_env(doc: Doc, maps: dict[str, dict[str, str]]) -> list[str]:
    missing = []
    for c in containers(doc, init=True):
        missing += [f"{doc}: ConfigMap {source}" for source in c.get("envFrom", [])
                    if source.get("configMapRef", {}).get("name") not in maps]
        defined = container_env_names(c, maps)
        for e in c.get("env", []):
            # Kubernetes expands $(VAR) only from variables defined before it; others stay literal.
            before = defined[: defined.index(e["name"])]
            missing += [f"{doc}: {e['name']} uses $({v}) before it is defined"
                        for v in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", e.get("value", "")) if v not in before]
    return missing


def test_references_resolve(docs: list[Doc]) -> None:
    names = {(d.kind, d.name) for d in docs}
    maps = config_maps(docs)
    missing = []
    for doc in workloads(docs):
        account = pod_spec(doc)["serviceAccountName"]
        missing += [] if ("ServiceAccount", account) in names else [f"{doc}: ServiceAccount {account}"]
        service = doc.body["spec"].get("serviceName")
        missing += [] if service is None or ("Service", service) in names else [f"{doc}: Service {service}"]
        missing += _unresolved_env(doc, maps)
    for ingress in (d for d in docs if d.kind == "Ingress"):
        missing += [f"{ingress}: Service {p['backend']['service']['name']}"
                    for rule in ingress.body["spec"]["rules"] for p in rule["http"]["paths"]
                    if ("Service", p["backend"]["service"]["name"]) not in names]
    assert missing == []


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_selectors_select_what_they_mean(docs: list[Doc]) -> None:
    pods = {str(d): (d, d.body["spec"]["template"]["metadata"]["labels"]) for d in workloads(docs)}
    for doc, labels in pods.values():
        assert _selects(doc.body["spec"]["selector"]["matchLabels"], labels), f"{doc} does not select its pods"
    for svc in (d for d in docs if d.kind == "Service"):
        assert [w for w, labels in pods.values() if _selects(svc.body["spec"]["selector"], labels)], f"{svc}"
    for pdb in (d for d in docs if d.kind == "PodDisruptionBudget"):
        [(target, _)] = [(w, labels) for w, labels in pods.values()
                         if _selects(pdb.body["spec"]["selector"]["matchLabels"], labels)]
        assert target.body["spec"].get("replicas", 1) > pdb.body["spec"]["minAvailable"], \
            f"{pdb} would block every eviction of {target}"


def test_every_container_has_probes_and_resource_requests_and_limits(docs: list[Doc]) -> None:
    lacking = []
    for doc in workloads(docs):
        for c in containers(doc, init=True):
            lacking += [f"{doc} {c['name']}: resources.{r}" for r in ("requests", "limits")
                        if not {"cpu", "memory"} <= set(c.get("resources", {}).get(r, {}))]
        for c in containers(doc):
            lacking += [f"{doc} {c['name']}: {p}" for p in ("readinessProbe", "livenessProbe") if p not in c]
    assert lacking == []


def test_paiq_is_restarted_only_when_it_cannot_recover_and_taken_out_of_service_while_it_heals(
        docs: list[Doc]) -> None:
    """Liveness on /livez (a loop ended: restarting helps), readiness on /healthz (the database or broker
    away: a restart would not help, and every pod restarting at once during an outage would make it worse)."""
    probes = {}
    for doc in workloads(docs):
        for c in containers(doc):
            if str(c.get("image", "")).startswith("paiq"):
                probes[c["name"]] = (c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"])
    assert probes and set(probes.values()) == {("/livez", "/healthz")}, probes


def test_the_launcher_runs_on_gpu_nodes_with_the_host_network_and_docker_socket(docs: list[Doc]) -> None:
    [launcher] = [d for d in docs if d.kind == "DaemonSet"]
    spec = pod_spec(launcher)
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert {t["key"] for t in spec["tolerations"]} >= {"nvidia.com/gpu"}
    assert spec["nodeSelector"]
    sockets = [v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/var/run/docker.sock"]
    assert sockets and sockets[0]["hostPath"]["type"] == "Socket"
    [container] = containers(launcher)
    assert not container["securityContext"].get("privileged", False)
    others = [d for d in workloads(docs) if d is not launcher]
    assert all(pod_spec(d)["securityContext"]["runAsNonRoot"] for d in others), "only the launcher runs as root"


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions In / NotIn / Exists) against a pod's labels."""
    if not _selects(selector.get("matchLabels", {}), labels):
        return False
    for e in selector.get("matchExpressions", []):
        value = labels.get(e["key"])
        ok = {"In": value in e.get("values", []), "NotIn": value not in e.get("values", []),
              "Exists": value is not None, "DoesNotExist": value is None}[e["operator"]]
        if not ok:
            return False
    return True


def test_only_paiqs_services_and_the_launcher_nodes_reach_the_database_and_the_broker(docs: list[Doc]) -> None:
    """docs, Security: every pod of the namespace is isolated for ingress; MongoDB's and RabbitMQ's ports
    admit paiq's own pods, each other, and the launcher nodes' range; no rule admits every source."""
    policies = [d for d in docs if d.kind == "NetworkPolicy"]
    pods = {str(d): d.body["spec"]["template"]["metadata"]["labels"] for d in workloads(docs)}
    deny = [p for p in policies if p.body["spec"]["podSelector"] == {} and "ingress" not in p.body["spec"]]
    assert deny and deny[0].body["spec"]["policyTypes"] == ["Ingress"], "no default deny of ingress"
    for target in ("mongodb", "rabbitmq"):
        [workload] = [w for w, labels in pods.items() if labels.get("app.kubernetes.io/name") == target]
        rules = [rule for p in policies if _matches(p.body["spec"]["podSelector"], pods[workload])
                 for rule in p.body["spec"].get("ingress", [])]
        assert rules, f"no policy admits anything to {target}"
        for rule in rules:
            assert rule.get("from"), f"a rule admits every source to {target}: {rule}"
            for source in rule["from"]:
                if "podSelector" in source:
                    allowed = [w for w, labels in pods.items() if _matches(source["podSelector"], labels)]
                    assert all(("paiq" in w or "mongodb" in w or "rabbitmq" in w) for w in allowed), allowed
                else:
                    assert source["ipBlock"]["cidr"] != "0.0.0.0/0", f"{target} open to every address"
