"""Credentials at rest, the pure parts (issue 35): a job's SSH private key sealed with PAIQ_SECRETS_KEY (and
opened only with it), a document an earlier paiq wrote in clear still read, and everything sealed again under
a new first key (the writes the sealing pass makes, shared/db/resealing.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from services.launcher.container.jobsecrets import ssh_key
from services.submit.app import create_app
from services.submit.routes.ssh import new_job_key, stored_job_key
from shared.db.resealing import Progress, Sealed, resealed_configs
from shared.errors import DriverError
from shared.jobconfig.model import JobConfig
from shared.jobconfig.sealing import (
    SealedValueError,
    SealingError,
    key_fingerprint,
    new_key,
    open_registry_auth,
    open_secrets,
    open_text,
    reseal_config,
    reseal_text,
    seal_config,
    seal_text,
)
from shared.lifecycle import exitcodes
from shared.records import CONFIGS_APART, PACKED_CONFIG, JobRecord
from shared.tasks.jobkeys import CLEAR_FIELD, SEALED_FIELD, JobKey, StoredJobKey, resealed
from tests.unit.factories import config_dict, make_job
from tests.unit.test_sealing import SECRET, v2_config
from tests.unit.test_v2_submit_api import ALICE, make_client

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

A, B = new_key(), new_key()
PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
       "\n-----END OPENSSH PRIVATE KEY-----\n")
BODY = PEM.splitlines()[1]
KEY = JobKey(job_id="alice~job1~0a1b2c3d", user="alice", job_name="job1", private_key=SecretStr(PEM),
             public_key="ssh-ed25519 AAAA paiq:alice~job1", user_keys=("ssh-rsa BBBB",), created_ms=5)
CLEAR_DOC = {"_id": KEY.job_id, "user": "alice", "job_name": "job1", CLEAR_FIELD: PEM,
             "public_key": KEY.public_key, "user_keys": ["ssh-rsa BBBB"], "created_ms": 5}


def applied(doc: dict[str, Any], write: tuple[dict[str, Any], dict[str, Any]] | dict[str, Any]) -> dict[str, Any]:
    """``doc`` after a write (a filter and an update, or an update alone), as the server applies it."""
    filt, update = write if isinstance(write, tuple) else ({}, write)
    for field, want in filt.items():
        assert (field in doc) if isinstance(want, dict) else doc.get(field) == want, (field, want)
    out = {**doc, **update.get("$set", {})}
    for field in update.get("$unset", {}):
        out.pop(field, None)
    return out


def test_a_stored_key_holds_no_trace_of_its_private_key_and_opens_with_the_key_only() -> None:
    doc = KEY.to_document(A)
    assert set(doc) == {"_id", "user", "job_name", SEALED_FIELD, "public_key", "user_keys", "created_ms"}
    assert BODY not in json.dumps(doc) and "PRIVATE" not in json.dumps(doc)
    stored = StoredJobKey.from_document(doc)
    assert BODY not in repr(stored) and stored.name == KEY.name
    assert stored.opened(A) == KEY
    assert stored.opened(f"{B},{A}") == KEY  # a new key first, the old after it: still opens


@pytest.mark.parametrize(("key", "error", "words"), [
    (None, SealingError, "PAIQ_SECRETS_KEY is not set here"),
    (B, SealedValueError, "cannot be opened with PAIQ_SECRETS_KEY: it was sealed with another key"),
], ids=["unset", "another-key"])  # ids of their own: the keys are new each run (pytest-xdist's workers compare ids)
def test_a_key_that_cannot_be_opened_says_why_naming_the_setting(key: str | None, error: type[Exception],
                                                                 words: str) -> None:
    stored = KEY.sealed(A)
    with pytest.raises(error) as raised:
        stored.opened(key)
    assert words in str(raised.value) and "SSH private key of job job1 of alice" in str(raised.value)
    assert BODY not in str(raised.value)


def test_a_document_an_earlier_paiq_wrote_in_clear_is_still_read_without_a_key() -> None:
    stored = StoredJobKey.from_document(CLEAR_DOC)
    assert stored.opened(None) == KEY == stored.opened(A)
    assert stored.to_document() == CLEAR_DOC  # read back as it is: only the sealing pass changes it


@pytest.mark.parametrize(("doc", "key"), [
    (CLEAR_DOC, A),  # an earlier paiq's clear key: sealed, its clear field gone
    (KEY.to_document(A), A),  # sealed under the first key already: sealed again all the same
    (KEY.to_document(A), f"{B},{A}"),  # a rotation: sealed again under B
], ids=["clear", "sealed-under-the-first", "rotated"])
def test_the_pass_seals_a_key_document_under_the_first_key(doc: dict[str, Any], key: str) -> None:
    write = resealed(doc, key)
    assert write is not None
    after = applied(doc, write)
    assert CLEAR_FIELD not in after and BODY not in json.dumps(after)
    first = key.split(",")[0]
    assert StoredJobKey.from_document(after).opened(first) == KEY  # the first key alone opens it


def test_the_pass_leaves_a_document_without_a_private_key_and_names_one_no_key_opens() -> None:
    assert resealed({"_id": "x", "user": "u", "job_name": "j", "public_key": "p"}, A) is None
    with pytest.raises(SealedValueError):
        resealed(KEY.to_document(B), A)


def test_a_fingerprint_names_the_first_key_without_telling_it() -> None:
    assert key_fingerprint(f"{B},{A}") == key_fingerprint(B) == key_fingerprint(f" {B} ")
    assert key_fingerprint(A) != key_fingerprint(B)
    assert B not in key_fingerprint(B) and B[:8] not in key_fingerprint(B)


def test_text_sealed_under_a_opens_after_rotation_with_b_alone() -> None:
    token = seal_text("private text", A)
    rotated = reseal_text(token, f"{B},{A}", "a text")
    assert open_text(rotated, B, "a text") == "private text"
    with pytest.raises(SealedValueError):
        open_text(token, B, "a text")


def test_a_configs_secrets_and_registry_credentials_are_sealed_again_under_the_first_key() -> None:
    config = seal_config(v2_config(), A)
    again = reseal_config(config, f"{B},{A}")
    assert open_secrets(again, B) == open_secrets(config, A) and SECRET in json.dumps(open_secrets(again, B))
    for old, new in zip(config.task_roles, again.task_roles, strict=True):
        assert open_registry_auth(new.registry_auth, B) == open_registry_auth(old.registry_auth, A)
    with pytest.raises(SealedValueError):
        open_secrets(config, B)
    plain = v2_config().model_copy(update={"secrets": {}, "registry_auth": None, "task_roles": tuple(
        r.model_copy(update={"registry_auth": None}) for r in v2_config().task_roles)})
    assert reseal_config(plain, A) is plain


def job_with(config: JobConfig, extras_bytes: int = 0) -> JobRecord:
    if extras_bytes:  # big enough to be packed, or apart (shared.packing)
        config = config.model_copy(update={"extras": {"note": "x" * extras_bytes}})
    return make_job(config)


@pytest.mark.parametrize(("extras_bytes", "apart"), [(0, False), (40_000, False), (40_000, True)])
def test_the_pass_seals_a_jobs_stored_configs_again_in_each_form(extras_bytes: int, apart: bool) -> None:
    job = job_with(seal_config(v2_config(), A), extras_bytes)
    doc, configs = job.documents() if apart else (job.to_document(), None)
    if apart:
        assert configs is not None and doc.get(CONFIGS_APART)
        doc = configs
    elif extras_bytes:
        assert PACKED_CONFIG in doc
    write = resealed_configs(doc, f"{B},{A}", apart=apart)
    assert write is not None
    after = applied(doc, write)
    whole = JobRecord.from_document({**job.head_document(), **{k: v for k, v in after.items() if k != "_id"}})
    assert open_secrets(whole.config, B) == open_secrets(job.config, A)
    assert whole.raw_config == job.raw_config and whole.config.extras == job.config.extras


def test_a_jobs_configs_without_secrets_are_left_alone() -> None:
    assert resealed_configs(make_job().to_document(), A, apart=False) is None


def test_the_launcher_opens_the_key_for_the_containers_files_or_fails_the_task_naming_the_setting() -> None:
    assert ssh_key(None, None) is None
    assert ssh_key(KEY.sealed(A), f"{B},{A}") == KEY
    with pytest.raises(DriverError) as raised:
        ssh_key(KEY.sealed(A), None)
    assert raised.value.exit_code == exitcodes.CONFIG_ERROR
    assert raised.value.reason.startswith("the job's SSH key cannot be put in its container: ")
    assert "PAIQ_SECRETS_KEY" in raised.value.reason


def test_submit_stores_a_new_key_sealed_and_none_without_a_key() -> None:
    job = make_job()
    assert stored_job_key(job, (), None) is None
    stored = stored_job_key(job, ("ssh-rsa CCCC",), A)
    assert stored is not None and stored.clear_private_key is None and stored.user_keys == ("ssh-rsa CCCC",)
    assert stored.opened(A).private_key.get_secret_value().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert new_job_key(job, ()).private_key.get_secret_value() != stored.opened(A).private_key.get_secret_value()


def test_the_operators_line_after_a_rotation() -> None:
    done = Sealed(previous="sha256:0123", progress=Progress(to="sha256:4567", keys=3, clear_keys=1, jobs=2, hooks=1))
    assert done.sentence() == ("re-sealed 3 job keys (1 of them stored in clear by an earlier paiq), 2 jobs' "
                               "secrets and 1 webhooks' signing keys under the new first key of PAIQ_SECRETS_KEY; "
                               "the old key may now be removed")
    first = Sealed(previous=None, progress=Progress(to="sha256:4567", keys=5, clear_keys=5, unopened=["x"],
                                                      unopened_count=1))
    assert first.sentence().startswith("sealed 5 job keys (5 of them stored in clear by an earlier paiq)")
    assert "1 could not be opened with any key of PAIQ_SECRETS_KEY" in first.sentence()


async def test_the_api_without_a_key_makes_no_key_pair_and_says_why_and_a_key_it_cannot_open_is_a_503() -> None:
    deps, store = make_client({})
    async with TestClient(TestServer(create_app(deps))) as http:
        accepted = await http.post("/api/v1/user/alice/jobs", json=config_dict(jobName="k"), headers=ALICE)
        assert accepted.status == 202, await accepted.text()
        job = await store.find_job("alice", "k")
        assert job is not None and job.id not in store.keys
        resp = await http.get("/api/v1/user/alice/jobs/k/ssh", headers=ALICE)
        answer = await resp.json()
        assert resp.status == 404 and answer["code"] == "NoJobSshInfoError"
        assert "PAIQ_SECRETS_KEY, which its operator has not set" in answer["message"]
        # a key sealed by a platform with a key this service lacks: 503 naming the setting, never a 500
        store.keys[job.id] = KEY.model_copy(update={"job_id": job.id, "job_name": "k"}).sealed(A)
        resp = await http.get("/api/v1/user/alice/jobs/k/ssh/alice~k", headers=ALICE)
        answer = await resp.json()
        assert resp.status == 503 and answer["code"] == "ServiceUnavailableError", answer
        assert "PAIQ_SECRETS_KEY is not set here" in answer["message"] and BODY not in answer["message"]
    deps.cpu.shutdown()


async def test_the_download_opens_the_sealed_key_with_the_services_key() -> None:
    deps, store = make_client({"PAIQ_SECRETS_KEY": f"{B},{A}"})
    async with TestClient(TestServer(create_app(deps))) as http:
        assert (await http.post("/api/v1/user/alice/jobs", json=config_dict(jobName="k"), headers=ALICE)).status == 202
        job = await store.find_job("alice", "k")
        assert job is not None
        stored = store.keys[job.id]
        assert stored.clear_private_key is None and stored.opened(B) == stored.opened(f"{B},{A}")  # sealed under B
        resp = await http.get("/api/v1/user/alice/jobs/k/ssh/alice~k", headers=ALICE)
        assert resp.status == 200 and await resp.text() == stored.opened(B).private_key.get_secret_value()
        store.keys[job.id] = KEY.model_copy(update={"job_id": job.id, "job_name": "k"}).sealed(A)  # the old key's
        resp = await http.get("/api/v1/user/alice/jobs/k/ssh/alice~k", headers=ALICE)
        assert resp.status == 200 and await resp.text() == PEM
    deps.cpu.shutdown()
