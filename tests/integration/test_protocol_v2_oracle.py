"""Protocol v2 decided by running OpenPAI v1.8's own code, not by reading it: the oracle
(tests/oracle/openpai_v2: its schema and submit middleware under the ajv, ajv-merge-patch, js-yaml and
mustache versions its lock file pinned, in node; installed by tests/run.sh) runs in the suite.

- OpenPAI's own unit tests of its protocol pass under the oracle (it is OpenPAI's code as it ran);
- the verdicts the unit tests read (tests/unit/protocol_v2_corpus/verdicts.json) are the live oracle's;
- a few hundred documents derived from the corpus's accepted jobs (a field removed, a value of the wrong
  type or out of its range, a name against its pattern, an unknown key, a prerequisite named twice or
  not at all), judged by the oracle and by paiq: paiq refuses every one OpenPAI refused, and accepts
  every one OpenPAI accepted but where a bound of paiq's own refuses it (the deliberate differences of
  shared/admission/v2/checks.py).
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.admission.v2.checks import validate_v2_body
from shared.admission.validation import Accepted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
ORACLE = ROOT / "tests" / "oracle" / "openpai_v2"
CORPUS = ROOT / "tests" / "unit" / "protocol_v2_corpus"
VERDICTS: dict[str, dict[str, Any]] = json.loads((CORPUS / "verdicts.json").read_text())["verdicts"]
Doc = dict[str, Any]
# Where paiq is stricter than OpenPAI's schema on purpose (shared/admission/v2/checks.py): a refusal of a
# document OpenPAI accepted must name one of these (the last part of the path).
PAIQ_BOUNDS = ("cpu", "memoryMB", "gpu", "instances", "shmMB", "minFailedInstances", "minSucceededInstances")


def oracle(bodies: list[tuple[str, str]]) -> list[Doc]:
    """The oracle's verdict on each ``(name, YAML text)``, as OpenPAI v1.8's REST server judged it."""
    if not (ORACLE / "node_modules").is_dir():
        pytest.fail("the OpenPAI v2 oracle is not installed: tests/run.sh installs it "
                    "(npm ci --prefix tests/oracle/openpai_v2)")
    items = [{"file": name, "text": text} for name, text in bodies]
    done = subprocess.run(["node", str(ORACLE / "validate.js"), "--stdin"], input=json.dumps(items),
                          capture_output=True, text=True, timeout=240, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [line["file"] for line in lines] == [name for name, _ in bodies], done.stderr[-2000:]
    return lines


def test_openpais_own_protocol_tests_pass_under_the_oracle() -> None:
    done = subprocess.run(["node", str(ORACLE / "selftest.js")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_stored_verdicts_are_the_live_oracles() -> None:
    names = sorted(VERDICTS)
    live = oracle([(name, (CORPUS / name).read_text(errors="replace")) for name in names])
    for name, verdict in zip(names, live, strict=True):
        stored = VERDICTS[name]
        assert verdict["valid"] == stored["valid"], name
        if stored["valid"]:
            assert verdict["rendered"] == stored["rendered"], name
        else:
            assert (verdict["stage"], verdict["errors"]) == (stored["stage"], stored["errors"]), name


# --- derived documents -------------------------------------------------------------------------------

Mutation = Callable[[Doc], Doc | None]


def _first_role(doc: Doc) -> Doc | None:
    roles = doc.get("taskRoles")
    if not isinstance(roles, dict) or not roles:
        return None
    role = next(iter(roles.values()))
    return role if isinstance(role, dict) else None


def _on_role(change: Callable[[Doc], None]) -> Mutation:
    def mutate(doc: Doc) -> Doc | None:
        role = _first_role(doc)
        if role is None:
            return None
        change(role)
        return doc
    return mutate


def _on_resources(key: str, value: Any) -> Mutation:
    def change(role: Doc) -> None:
        role.setdefault("resourcePerInstance", {})[key] = value
    return _on_role(change)


def _without(key: str) -> Mutation:
    def mutate(doc: Doc) -> Doc | None:
        return {k: v for k, v in doc.items() if k != key}
    return mutate


def _top(key: str, value: Any) -> Mutation:
    def mutate(doc: Doc) -> Doc | None:
        return {**doc, key: value}
    return mutate


def _duplicate_prerequisite(doc: Doc) -> Doc | None:
    prerequisites = doc.get("prerequisites")
    if not isinstance(prerequisites, list) or not prerequisites:
        return None
    return {**doc, "prerequisites": [*prerequisites, copy.deepcopy(prerequisites[0])]}


def _role_names_image(image: str) -> Mutation:
    def change(role: Doc) -> None:
        role["dockerImage"] = image
    return _on_role(change)


def _role_set(key: str, value: Any) -> Mutation:
    def change(role: Doc) -> None:
        role[key] = value
    return _on_role(change)


def _role_drop(key: str) -> Mutation:
    def change(role: Doc) -> None:
        role.pop(key, None)
    return _on_role(change)


MUTATIONS: dict[str, Mutation] = {
    "no name": _without("name"), "no type": _without("type"), "no taskRoles": _without("taskRoles"),
    "no protocolVersion": _without("protocolVersion"), "protocolVersion 3": _top("protocolVersion", 3),
    "name with a space": _top("name", "a b"), "name with a dot": _top("name", "a.b"),
    "name of 256": _top("name", "n" * 256), "type other": _top("type", "service"),
    "unknown top key": _top("colour", "blue"), "jobRetryCount -1": _top("jobRetryCount", -1),
    "jobRetryCount text": _top("jobRetryCount", "1"), "parameters a list": _top("parameters", [1]),
    "instances 0": _role_set("instances", 0), "instances text": _role_set("instances", "2"),
    "instances 1.5": _role_set("instances", 1.5), "instances 3": _role_set("instances", 3),
    "no commands": _role_drop("commands"), "commands empty": _role_set("commands", []),
    "commands a string": _role_set("commands", "echo"), "no dockerImage": _role_drop("dockerImage"),
    "dockerImage undeclared": _role_names_image("no_such_image"), "unknown role key": _role_set("colour", 1),
    "no resources": _role_drop("resourcePerInstance"), "cpu text": _on_resources("cpu", "1"),
    "gpu 1.5": _on_resources("gpu", 1.5), "memoryMB 0": _on_resources("memoryMB", 0),
    "ports bad label": _on_resources("ports", {"a-b": 1}), "ports empty": _on_resources("ports", {}),
    "ports 2": _on_resources("ports", {"web": 2}), "unknown resource": _on_resources("disk", 1),
    "completion text": _role_set("completion", {"minFailedInstances": "x"}),
    "completion unknown": _role_set("completion", {"maxFailed": 1}),
    "completion null": _role_set("completion", {"minFailedInstances": None, "minSucceededInstances": None}),
    "shmMB text": _role_set("extraContainerOptions", {"shmMB": "64"}),
    "taskRetryCount text": _role_set("taskRetryCount", "1"),
    "prerequisite twice": _duplicate_prerequisite,
    "role name with a dash": lambda doc: ({**doc, "taskRoles": {"a-b": _first_role(doc)}}
                                          if _first_role(doc) is not None else None),
}


def derived() -> Iterator[tuple[str, str]]:
    """Every mutation that applies to every corpus document both OpenPAI and paiq accept, as YAML text."""
    for name in sorted(n for n, v in VERDICTS.items() if v["valid"]):
        if not isinstance(validate_v2_body((CORPUS / name).read_bytes()), Accepted):
            continue  # a deliberate difference (tests/unit/test_protocol_v2_corpus.py DIFFERENCES)
        original = yaml.safe_load((CORPUS / name).read_text())
        if not isinstance(original, dict):
            continue
        for label, mutate in MUTATIONS.items():
            changed = mutate(copy.deepcopy(original))
            if changed is not None:
                yield f"{name} / {label}", yaml.safe_dump(changed, sort_keys=False, allow_unicode=True)


def test_paiq_judges_documents_derived_from_the_corpus_as_openpai_did() -> None:
    bodies = list(derived())
    assert len(bodies) > 1000
    wrong = []
    for (name, text), verdict in zip(bodies, oracle(bodies), strict=True):
        result = validate_v2_body(text.encode())
        if not verdict["valid"] and isinstance(result, Accepted):
            wrong.append(f"{name}: accepted; OpenPAI refused it ({verdict['stage']}: {str(verdict['errors'])[:200]})")
        elif verdict["valid"] and not isinstance(result, Accepted):
            paths = [p.path for p in result.problems]
            if not all(path.split(".")[-1] in PAIQ_BOUNDS for path in paths):
                wrong.append(f"{name}: refused ({result.message[:200]}); OpenPAI accepted it")
    assert not wrong, f"{len(wrong)} of {len(bodies)} judged otherwise than OpenPAI:\n" + "\n".join(wrong[:40])
