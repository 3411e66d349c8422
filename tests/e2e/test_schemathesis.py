"""schemathesis against a running platform: the served OpenAPI document, every route it describes.

For each operation, cases generated from the document (valid ones, then ones that break it) are sent
with an administrator's bearer token, and each answer goes through schemathesis's checks: no 5xx, a
status the operation documents, a documented content type, a body that matches the documented schema.
Every failure is collected (not only the first of an operation) and the test lists them all, with what
the services logged for their 500s. The run has a time budget (BUDGET_S), shared among the operations.

Not fuzzed: the event stream (an answer that never ends), and a change of the admin's own password or
rights (it would end the token the run uses); nothing else can take the platform down, as the admin
cannot be removed and generated jobs are made cheap. Path parameters are generated, and for about half
of the cases name what exists (the admin, a known job, its task and key, the default virtual cluster),
so that the answers with bodies are checked too, not only the 404s.

Jobs generated from the JobConfig schema must be accepted: the test counts the 202s of the submit
routes. To keep those jobs cheap, the image and commands are replaced (``local/busybox`` running
``true``), the roles and tasks are capped and retries turned off before sending, and each name is made
unique; tests/unit/test_openapi_routes.py shows, without a platform, that generated images, commands,
sizes and names are accepted too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.e2e.conftest import job_config, raw
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# (method, path) -> why it is not fuzzed (a change of the admin is skipped case by case: changes_the_admin)
SKIPPED = {
    ("GET", "/api/v1/events"): "Server-Sent Events: the answer never ends, so there is no answer to check",
    ("DELETE", "/api/v2/authn/basic/logout"): "it would end the token the run uses",
}
def an_alias(path: str) -> bool:
    """v1.8's singular /api/v2/user and /api/v2/group aliases, and a group's extension/<key>/<key>... past one
    key: the same handlers (and documented shapes) as routes fuzzed, so fuzzing them again would only split the
    budget."""
    return path.split("/")[2:4] in (["v2", "user"], ["v2", "group"]) or "/extension/{key1}/" in path


# Cases per operation and mode: each run draws new ones (hypothesis's seed is random), so what one run leaves
# untried the next may try; the suite's minutes are what bounds them (a fuzz run of its own goes deeper:
# raise these and BUDGET_S).
EXAMPLES = {GenerationMode.POSITIVE: 15, GenerationMode.NEGATIVE: 15}
SUBMIT_EXAMPLES = {GenerationMode.POSITIVE: 60, GenerationMode.NEGATIVE: 40}  # few generated jobs are valid
SUBMIT_ROUTES = {("POST", "/api/v1/user/{user}/jobs"), ("PUT", "/api/v1/user/{user}/jobs/{job}")}
SUBMIT_COST = 4  # a generated job config takes about four times as long as another operation's case
# A budget for the whole run, so a slow machine makes it shorter, never longer than this.
BUDGET_S = 100.0
REQUEST_TIMEOUT_S = 15.0
KNOWN_JOB = "probe"
CHEAP_IMAGE = "local/busybox:latest"
MAX_ROLES, MAX_TASKS = 3, 2


@dataclass
class Findings:
    """What the run saw: statuses per operation, and each distinct failure with its first example."""

    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    # why valid-looking jobs were refused: the messages of the submit routes' 400s for generated valid cases
    refusals: Counter[str] = field(default_factory=Counter)
    failures: dict[tuple[str, str, int], str] = field(default_factory=dict)
    skipped_changes: int = 0

    def report(self) -> str:
        return "\n\n".join(f"{label} -> {status}: {title}\n{example}"
                           for (label, title, status), example in sorted(self.failures.items()))

    def summary(self) -> str:
        return "\n".join(f"{label} {code}: {n}" for (label, code), n in sorted(self.statuses.items()))


def server_errors(platform: Platform) -> str:
    """What the services logged for their 500s: the request and the exception's last line."""
    out = []
    for line in platform.logs().splitlines():
        if '"request failed"' in line:
            entry = json.loads(line)
            out.append(f"{entry.get('method')} {entry.get('path', '')[:120]}: "
                       f"{str(entry.get('exception', '')).strip().splitlines()[-1][:300]}")
    return "\n".join(out)


def unique_name(name: Any, serial: int) -> Any:
    """A name not taken yet: Hypothesis draws the same few names again and again, and a taken name is
    a 409 that says nothing about the schema."""
    return f"{name[:240]}-{serial}" if isinstance(name, str) else name


def cheap(body: Any) -> Any:
    """A job body that runs `true` in a local image, with at most MAX_ROLES roles of MAX_TASKS tasks.

    Only what makes a job costly changes: the rest of the generated config goes as it was generated."""
    if not isinstance(body, dict) or not isinstance(body.get("taskRoles"), list):
        return body
    roles = [dict(r) if isinstance(r, dict) else r for r in body["taskRoles"][:MAX_ROLES]]
    for role in roles:
        if isinstance(role, dict):
            role["command"] = "true"
            if role.get("taskNumber") not in (None, 1, 2, "1", "2"):
                role["taskNumber"] = MAX_TASKS
    # retryCount -2 starts the job again after every completion, until stopped
    retry = {} if body.get("retryCount") in (None, 0, "0") else {"retryCount": 0}
    return {**body, "image": CHEAP_IMAGE, "taskRoles": roles or body["taskRoles"], **retry}


def changes_the_admin(case: Case) -> bool:
    """Changing the admin's password would end the token this run uses (and every other admin session)."""
    body = case.body if isinstance(case.body, dict) else {}
    data = body.get("data") if isinstance(body.get("data"), dict) else {}
    return ((case.method == "PUT" and case.path == "/api/v1/user" and body.get("username") == ADMIN_USER
             and body.get("modify") is True)
            or (case.method == "PUT" and case.path in ("/api/v2/users", "/api/v2/user")  # v1.8's singular alias
                and data.get("username") == ADMIN_USER)
            or (case.method == "PUT" and case.path in ("/api/v2/users/{user}/password", "/api/v2/user/{user}/password")
                and (case.path_parameters or {}).get("user") == ADMIN_USER))


@dataclass
class Fuzzer:
    base_url: str
    token: str
    deadline: float
    findings: Findings = field(default_factory=Findings)
    serial: int = 0
    sent_in_run: int = 0  # cases this run sent: its first is sent even past its deadline
    session: requests.Session = field(default_factory=requests.Session)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def send(self, case: Case, mode: GenerationMode) -> None:
        # Past the run's share of the budget, only its first case: on a loaded machine the runs before it may
        # have used up the budget, and every operation is still asked once (the deletions, fuzzed last, got no
        # request at all once).
        if time.monotonic() > self.deadline and self.sent_in_run:
            return
        if changes_the_admin(case):
            self.findings.skipped_changes += 1
            return
        self.sent_in_run += 1
        submit = (case.method, case.path) in SUBMIT_ROUTES
        if submit:
            self.serial += 1
            case.body = cheap(case.body)
            if case.path_parameters and "job" in case.path_parameters:
                case.path_parameters["job"] = unique_name(case.path_parameters["job"], self.serial)
            elif isinstance(case.body, dict):
                case.body["jobName"] = unique_name(case.body.get("jobName"), self.serial)
        label = f"{case.method} {case.path}"
        try:
            response = case.call(base_url=self.base_url, session=self.session, headers=self.headers,
                                 timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as e:
            self.findings.failures.setdefault((label, f"no answer: {type(e).__name__}", 0),
                                              case.as_curl_command(headers=self.headers)[:1500])
            return
        self.findings.statuses[(label, response.status_code)] += 1
        if submit and mode == GenerationMode.POSITIVE and response.status_code == 400:
            self.findings.refusals[response.json().get("message", "")[:200]] += 1
        try:
            case.validate_response(response, checks=CHECKS, headers=self.headers,
                                   transport_kwargs={"base_url": self.base_url, "headers": self.headers})
        except FailureGroup as group:
            for failure in group.exceptions:
                self.findings.failures.setdefault(
                    (label, failure.title, response.status_code),
                    f"{case.as_curl_command(headers=self.headers)[:1500]}\n-> {response.status_code} "
                    f"{response.text[:300]!r}\n{failure.message[:600]}")

    def fuzz(self, strategy: st.SearchStrategy[Case], mode: GenerationMode, examples: int) -> None:
        @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def run(case: Case) -> None:
            self.send(case, mode)

        # Unsatisfiable: nothing to break (an operation whose parameters are all fixed here)
        with contextlib.suppress(Unsatisfiable):
            run()


def known(path: str) -> dict[str, Any]:
    """Path parameters that name what exists: the admin, the known job, its task and public key, the
    default virtual cluster, a file of the portal. (A submission's job name is made unique instead.)"""
    values = {"user": ADMIN_USER, "job": KNOWN_JOB, "role": "main", "index": 0, "vc": "default",
              "file": f"{ADMIN_USER}~{KNOWN_JOB}.pub" if "/ssh/" in path else "app.js"}
    return {name: value for name, value in values.items() if f"{{{name}}}" in path}


def strategy(operation: Any, mode: GenerationMode) -> st.SearchStrategy[Case]:
    """Cases with generated path parameters, and with ones naming what exists for about half of them: a
    generated user may not submit as the admin, and a generated job name is only ever a 404."""
    submit = (operation.method.upper(), operation.path) in SUBMIT_ROUTES
    own = {k: v for k, v in known(operation.path).items() if not (submit and k == "job")}
    generated = operation.as_strategy(generation_mode=mode)
    if not own:
        return cast(st.SearchStrategy[Case], generated)
    owned = operation.as_strategy(generation_mode=mode, path_parameters=own)
    if submit and mode == GenerationMode.POSITIVE:
        return cast(st.SearchStrategy[Case], owned)  # only the admin's own submissions may be accepted
    return st.one_of(generated, owned)


def cost(operation: Any, examples: int) -> int:
    """What a run's cases cost, roughly: a job config takes several times longer to generate."""
    return examples * (SUBMIT_COST if (operation.method.upper(), operation.path) in SUBMIT_ROUTES else 1)


def fuzz_platform(api: str, token: str) -> Findings:
    schema = schemathesis.openapi.from_url(f"{api}/api/v1/openapi.json")
    # Deletions last: every other operation on a job uses the known job.
    operations = sorted((result.ok() for result in schema.get_all_operations()), key=lambda op: op.method == "delete")
    runs = [(op, mode, examples) for op in operations if (op.method.upper(), op.path) not in SKIPPED
            and not an_alias(op.path)
            for mode, examples in (SUBMIT_EXAMPLES if (op.method.upper(), op.path) in SUBMIT_ROUTES
                                   else EXAMPLES).items()
            if mode == GenerationMode.POSITIVE or list(op.iter_parameters()) or list(op.body)]
    assert len(operations) > 20
    fuzzer = Fuzzer(base_url=api, token=token, deadline=0.0)
    end, left = time.monotonic() + BUDGET_S, sum(cost(op, examples) for op, _, examples in runs)
    for operation, mode, examples in runs:
        # Each run gets its share (by the cost of its cases) of what is left of the budget, so a slow
        # machine fuzzes every operation with fewer cases rather than some not at all.
        share = cost(operation, examples)
        fuzzer.deadline = time.monotonic() + (end - time.monotonic()) * share / left
        left -= share
        fuzzer.sent_in_run = 0
        fuzzer.fuzz(strategy(operation, mode), mode, examples)
    unanswered = {op.label for op, _, _ in runs} - {label for label, _ in fuzzer.findings.statuses}
    assert not unanswered, f"operations that got no answer: {sorted(unanswered)}"
    return fuzzer.findings


@pytest.mark.parametrize("platform", ["separate"], indirect=True)
async def test_the_served_document_holds_for_generated_requests(platform: Platform) -> None:
    """One platform shape only: the REST API is the same code in both, and the run has a time budget."""
    status, login, _ = await raw(platform, "POST", "/api/v1/token",
                                 json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert status == 200, login
    token = login["token"]
    status, body, _ = await raw(platform, "POST", f"/api/v1/user/{ADMIN_USER}/jobs",
                                json=job_config(KNOWN_JOB, command="true"),
                                headers={"Authorization": f"Bearer {token}"})
    assert status == 202, body
    started = time.monotonic()
    findings = await asyncio.to_thread(fuzz_platform, platform.api, token)
    took = time.monotonic() - started
    submitted = sum(n for (label, code), n in findings.statuses.items()
                    if code == 202 and label == "POST /api/v1/user/{user}/jobs")
    print(f"schemathesis: {sum(findings.statuses.values())} requests in {took:.0f}s "
          f"({findings.skipped_changes} changes of the admin skipped)\n{findings.summary()}\n"
          f"refusals of generated valid jobs: {findings.refusals.most_common(8)}")
    assert not findings.failures, (f"{len(findings.failures)} failures in {took:.0f}s:\n\n{findings.report()}\n\n"
                                   f"the services' log says:\n{server_errors(platform)}")
    assert submitted >= 5, f"few generated jobs were accepted ({submitted}); see the statuses printed"
