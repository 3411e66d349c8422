"""Operators set and see a virtual cluster's borrowing limit: ``PUT /api/v1/virtual-clusters/{vc}`` takes
``borrowing`` (``default`` takes only that), the VC answer says the limit and what is borrowed and lent now,
and ``paiq vc list|set|delete`` says the same in a table.

The API runs in the real aiohttp app with the fake store of :mod:`tests.unit.test_openapi_answers`: one
node of 4 GPUs, 16 CPUs and 32768 MB; ``research`` (a 50% quota, 25% of the GPUs to borrow) runs a job of
3 GPUs, one beyond its quota, on the GPU that ``default`` leaves idle, and an opportunistic job of 1 GPU
that counts in no quota. The CLI's commands run against that same app.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer

from services.cli import main as cli
from services.cli import vc as vc_cli
from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.openapi import document
from shared.bus.memory import MemoryBus
from shared.records import JobRecord, NodeRecord
from shared.scheduling.vclusters import Quota, VirtualCluster
from shared.settings.model import Settings
from tests.unit.factories import make_config, make_job, make_node, make_task, role_dict
from tests.unit.test_openapi_answers import FakeStore, FakeUsers

pytestmark = pytest.mark.unit

DOC = document()
ADMIN = {"Authorization": "Bearer admin-token"}
ALICE = {"Authorization": "Bearer alice-token"}
RESEARCH = VirtualCluster(name="research", quota=Quota(cpus=50, memory=50, gpus=50), borrowing=Quota(gpus=25),
                          groups=("team",))


def research_job(name: str, gpus: tuple[int, ...], priority: str = "test") -> JobRecord:
    config = make_config(role_dict(gpuNumber=len(gpus), cpuNumber=2, memoryMB=1000), jobName=name,
                         virtualCluster="research", extras={"hivedScheduler": {"jobPriorityClass": priority}})
    return make_job(config, tasks=[make_task(node_id="n1", gpus=gpus)])


@dataclass
class BorrowingStore(FakeStore):
    jobs: list[JobRecord] = field(default_factory=lambda: [
        research_job("big", (0, 1, 2)), research_job("spare", (3,), priority="oppo")])
    nodes: list[NodeRecord] = field(default_factory=lambda: [
        make_node(cpus=16, memory_mb=32768, gpus=["V100"] * 4)])
    vcs: list[VirtualCluster] = field(default_factory=lambda: [RESEARCH])

    async def delete_vc(self, name: str) -> bool:
        found = any(v.name == name for v in self.vcs)
        self.vcs = [v for v in self.vcs if v.name != name]
        return found

    async def active_jobs_in_vc(self, name: str) -> int:
        return sum(1 for j in self.jobs if j.virtual_cluster == name and not j.state.is_final)


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    deps = SubmitDeps(settings=Settings.from_env({}), store=cast(Any, BorrowingStore()), bus=MemoryBus(),
                      users=cast(Any, FakeUsers()))
    async with TestClient(TestServer(create_app(deps))) as test_client:
        yield test_client
    deps.cpu.shutdown()


async def get_vc(client: TestClient[Any, Any], name: str) -> dict[str, Any]:
    resp = await client.get(f"/api/v1/virtual-clusters/{name}")
    body: dict[str, Any] = await resp.json()
    assert resp.status == 200, body
    jsonschema.validate(body, {"$ref": "#/components/schemas/VirtualCluster", "components": DOC["components"]})
    return body


async def put_vc(client: TestClient[Any, Any], name: str, body: Any, headers: dict[str, str] = ADMIN,
                 status: int = 200) -> str:
    resp = await client.put(f"/api/v1/virtual-clusters/{name}", json=body, headers=headers)
    answer = await resp.json()
    assert resp.status == status, answer
    return str(answer["message"])


# --- the API ------------------------------------------------------------------------------------


async def test_the_answer_says_the_limit_and_what_is_borrowed_and_lent_now(client: TestClient[Any, Any]) -> None:
    research = await get_vc(client, "research")
    assert research["borrowing"] == {"cpus": 0, "memory": 0, "gpus": 25}
    # 4 GPUs of its jobs hold resources; the opportunistic one counts in no quota: 3 against a quota of 2
    assert research["used"] == {"cpus": 4, "memoryMB": 2000, "gpus": 4}
    assert research["borrowed"] == {"cpus": 0, "memoryMB": 0, "gpus": 1}
    assert research["lent"] == {"cpus": 0, "memoryMB": 0, "gpus": 0}
    default = await get_vc(client, "default")
    assert default["borrowing"] == {"cpus": 0, "memory": 0, "gpus": 0}
    assert default["borrowed"] == {"cpus": 0, "memoryMB": 0, "gpus": 0}
    assert default["lent"] == {"cpus": 0, "memoryMB": 0, "gpus": 1}
    listed = await (await client.get("/api/v1/virtual-clusters")).json()
    assert listed == {"default": default, "research": research}


async def test_a_put_sets_the_borrowing_limit_and_without_it_there_is_none(client: TestClient[Any, Any]) -> None:
    await put_vc(client, "lab", {"quota": {"gpus": 25}, "borrowing": {"gpus": 50, "cpus": 12.5}})
    assert (await get_vc(client, "lab"))["borrowing"] == {"cpus": 12.5, "memory": 0, "gpus": 50}
    await put_vc(client, "lab", {"quota": {"gpus": 25}})
    assert (await get_vc(client, "lab"))["borrowing"] == {"cpus": 0, "memory": 0, "gpus": 0}


@pytest.mark.parametrize(("body", "said"), [
    ({"borrowing": {"gpus": 101}}, "borrowing.gpus: must be at most 100"),
    ({"borrowing": {"cpus": -1}}, "borrowing.cpus: must be at least 0"),
    ({"borrowing": {"memory": "lots"}}, "borrowing.memory: must be a number"),
    ({"borrowing": {"disk": 5}}, "borrowing.disk: is not a resource (cpus, memory, gpus)"),
    ({"borrowing": 25}, "borrowing: must be an object"),
    ({"quota": {"gpus": 10}, "lend": {}}, "lend: is not a field of a virtual cluster (quota, borrowing, users, "
                                           "groups)"),
])
async def test_a_wrong_borrowing_is_refused_naming_the_field_and_the_rule(
        client: TestClient[Any, Any], body: Any, said: str) -> None:
    resp = await client.put("/api/v1/virtual-clusters/lab", json=body, headers=ADMIN)
    answer = await resp.json()
    assert (resp.status, answer["code"]) == (400, "InvalidParametersError")
    assert answer["message"] == f"invalid virtual cluster: {said}"
    assert (await client.get("/api/v1/virtual-clusters/lab")).status == 404


async def test_default_takes_its_borrowing_limit_and_keeps_the_quota_the_others_leave(
        client: TestClient[Any, Any]) -> None:
    assert await put_vc(client, "default", {"borrowing": {"gpus": 10, "cpus": 5}}) == \
        "virtual cluster default saved"
    default = await get_vc(client, "default")
    assert default["borrowing"] == {"cpus": 5, "memory": 0, "gpus": 10}
    assert default["quota"] == {"cpus": 50, "memory": 50, "gpus": 50}
    assert default["users"] == ["*"]
    # the stored default counts in no quota sum: the others may still take all that is left
    await put_vc(client, "lab", {"quota": {"cpus": 50, "memory": 50, "gpus": 50}})
    default = await get_vc(client, "default")
    assert (default["quota"], default["borrowing"]["gpus"]) == ({"cpus": 0, "memory": 0, "gpus": 0}, 10)
    listed = await (await client.get("/api/v1/virtual-clusters")).json()
    assert list(listed) == ["default", "research", "lab"]


@pytest.mark.parametrize(("body", "said"), [
    ({"quota": {"gpus": 10}, "borrowing": {"gpus": 10}}, "quota: may not be set for the default virtual cluster"),
    ({"users": ["alice"], "groups": []}, "users, groups: may not be set for the default virtual cluster"),
    ({"borrowing": {"gpus": 200}}, "borrowing.gpus: must be at most 100"),
    ([], "the body must be a JSON object"),
])
async def test_default_takes_nothing_but_borrowing(client: TestClient[Any, Any], body: Any, said: str) -> None:
    resp = await client.put("/api/v1/virtual-clusters/default", json=body, headers=ADMIN)
    answer = await resp.json()
    assert (resp.status, answer["code"]) == (400, "InvalidParametersError")
    assert said in answer["message"]
    assert (await get_vc(client, "default"))["borrowing"] == {"cpus": 0, "memory": 0, "gpus": 0}


async def test_only_an_admin_sets_a_borrowing_limit_and_default_is_never_deleted(
        client: TestClient[Any, Any]) -> None:
    resp = await client.put("/api/v1/virtual-clusters/default", json={"borrowing": {"gpus": 10}}, headers=ALICE)
    assert resp.status == 403
    await put_vc(client, "default", {"borrowing": {"gpus": 10}})
    resp = await client.delete("/api/v1/virtual-clusters/default", headers=ADMIN)
    assert (resp.status, (await resp.json())["message"]) == (400, "the default virtual cluster always exists")


def test_the_document_describes_borrowing_in_the_change_and_the_answer() -> None:
    schemas = DOC["components"]["schemas"]
    assert schemas["VirtualClusterChange"]["properties"]["borrowing"]["$ref"].endswith("/Quota")
    answer = schemas["VirtualCluster"]["properties"]
    assert {"borrowing", "borrowed", "lent"} <= set(answer)
    assert set(schemas["Amounts"]["properties"]) == {"cpus", "memoryMB", "gpus"}


# --- the CLI: its options ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "parsed"), [
    ("gpus=50", {"gpus": 50}),
    ("gpus=50,cpus=25,memory=12.5", {"gpus": 50, "cpus": 25, "memory": 12.5}),
    (" gpus = 0 , cpus=100 ", {"gpus": 0, "cpus": 100}),
    ("gpus=-5", {"gpus": -5}),  # a number: the API says what range it must be in
])
def test_a_percent_spec_reads_resource_equals_percent(text: str, parsed: dict[str, float]) -> None:
    assert vc_cli.parse_percents("--quota", text) == parsed


@pytest.mark.parametrize(("text", "said"), [
    ("gpu=50", "--borrowing: unknown resource 'gpu' (one of gpus, cpus, memory)"),
    ("gpus=half", "--borrowing: gpus='half' is not a number (percent of the cluster, 0-100)"),
    ("gpus=nan", "--borrowing: gpus='nan' is not a number"),
    ("gpus=", "--borrowing: gpus='' is not a number"),
    ("gpus", "--borrowing: expected RESOURCE=PERCENT[,...] with RESOURCE one of gpus, cpus, memory, got 'gpus'"),
    ("", "--borrowing: expected RESOURCE=PERCENT"),
    ("gpus=1,gpus=2", "--borrowing: gpus is given twice"),
    ("gpus=1,", "--borrowing: expected RESOURCE=PERCENT"),
])
def test_a_wrong_percent_spec_is_said_naming_the_option(text: str, said: str) -> None:
    with pytest.raises(vc_cli.VcSpecError) as raised:
        vc_cli.parse_percents("--borrowing", text)
    assert str(raised.value).startswith(said)


def set_args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["vc", "set", *argv])


CURRENT = {"quota": {"cpus": 50, "memory": 50, "gpus": 50}, "borrowing": {"cpus": 0, "memory": 0, "gpus": 25},
           "users": ["*"], "groups": ["team"]}


@pytest.mark.parametrize(("argv", "current", "sent"), [
    (["research", "--borrowing", "gpus=10"], CURRENT,
     vc_cli.VcChange({"cpus": 50, "memory": 50, "gpus": 50}, {"cpus": 0, "memory": 0, "gpus": 10}, ["*"], ["team"])),
    (["research", "--quota", "cpus=20", "--users", "a, b", "--groups", ""], CURRENT,
     vc_cli.VcChange({"cpus": 20, "memory": 50, "gpus": 50}, {"cpus": 0, "memory": 0, "gpus": 25}, ["a", "b"], [])),
    (["lab", "--quota", "gpus=10"], None, vc_cli.VcChange({"gpus": 10}, None, None, None)),
    (["lab", "--quota", "gpus=10", "--borrowing", "gpus=5", "--users", "bob"], None,
     vc_cli.VcChange({"gpus": 10}, {"gpus": 5}, ["bob"], None)),
    (["default", "--borrowing", "cpus=5"], {**CURRENT, "borrowing": {"cpus": 1, "memory": 2, "gpus": 3}},
     vc_cli.VcChange(None, {"cpus": 5, "memory": 2, "gpus": 3}, None, None)),
    # default is sent what was given: the API says why it takes only borrowing
    (["default", "--quota", "gpus=5"], CURRENT, vc_cli.VcChange({"gpus": 5}, None, None, None)),
])
def test_vc_set_sends_what_is_given_over_what_the_vc_has(argv: list[str], current: dict[str, Any] | None,
                                                        sent: vc_cli.VcChange) -> None:
    args = set_args(*argv)
    assert vc_cli.vc_change(args.name, current, vc_cli.vc_options(args)) == sent


def test_vc_set_needs_something_to_set_and_a_new_vc_needs_a_quota() -> None:
    with pytest.raises(vc_cli.VcSpecError, match="nothing to set: give --quota, --borrowing, --users or --groups"):
        vc_cli.vc_options(set_args("research"))
    with pytest.raises(vc_cli.VcSpecError, match="virtual cluster lab does not exist yet: a new one needs --quota"):
        vc_cli.vc_change("lab", None, vc_cli.vc_options(set_args("lab", "--borrowing", "gpus=5")))


def test_a_wrong_option_exits_2_with_one_line_before_the_api_is_asked(capsys: pytest.CaptureFixture[str]) -> None:
    # no server listens at this address: the option is refused before any call
    code = cli.main(["--api", "http://127.0.0.1:9", "vc", "set", "lab", "--quota", "gpus=5,disk=1"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == "paiq vc set: --quota: unknown resource 'disk' (one of gpus, cpus, memory)\n"


def test_the_table_shows_quota_limit_used_borrowed_and_lent() -> None:
    vc = {"quota": {"cpus": 50, "memory": 50, "gpus": 50}, "borrowing": {"cpus": 0, "memory": 0, "gpus": 25},
          "used": {"cpus": 4, "memoryMB": 2000, "gpus": 4}, "borrowed": {"cpus": 0.5, "memoryMB": 0, "gpus": 1},
          "lent": {"cpus": 0, "memoryMB": 0, "gpus": 0}}
    lines = vc_cli.vc_table({"research": vc})
    assert lines[0].split() == ["NAME", "QUOTA%", "BORROW-LIMIT%", "USED", "BORROWED", "LENT"]
    assert lines[1].split() == ["research", "50/50/50", "25/0/0", "4/4/2000", "1/0.5/0", "0/0/0"]
    assert lines[2].startswith("(gpus/cpus/memory")


# --- the CLI against the app --------------------------------------------------------------------


@pytest.fixture
def paiq(client: TestClient[Any, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """``await paiq("vc", "list")``: the exit status, what it printed and what it said on stderr."""
    env = {"PAIQ_DATA_DIR": str(tmp_path), "PAIQ_TOKEN": "admin-token"}

    async def run(*argv: str) -> tuple[int, str, str]:
        args = cli.parse_args(["--api", str(client.make_url("/")), *argv], env)
        code = await vc_cli.cmd_vc(args)
        out, err = capsys.readouterr()
        return code, out, err
    return run


async def test_paiq_vc_sets_lists_and_deletes_through_the_api(paiq: Any, client: TestClient[Any, Any]) -> None:
    assert await paiq("vc", "set", "research", "--borrowing", "gpus=10,cpus=5") == (
        0, "virtual cluster research saved\n", "")
    research = await get_vc(client, "research")
    assert (research["quota"]["gpus"], research["borrowing"], research["groups"]) == (
        50, {"cpus": 5, "memory": 0, "gpus": 10}, ["team"])
    assert (await paiq("vc", "set", "default", "--borrowing", "gpus=20"))[0] == 0
    code, out, _ = await paiq("vc", "list")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:-1]}
    assert code == 0
    assert rows["default"][1:] == ["50/50/50", "20/0/0", "0/0/0", "0/0/0", "1/0/0"]
    assert rows["research"][1:] == ["50/50/50", "10/5/0", "4/4/2000", "1/0/0", "0/0/0"]
    assert await paiq("vc", "set", "lab", "--quota", "gpus=10") == (0, "virtual cluster lab saved\n", "")
    assert await paiq("vc", "delete", "lab") == (0, "virtual cluster lab deleted\n", "")
    assert (await client.get("/api/v1/virtual-clusters/lab")).status == 404


@pytest.mark.parametrize(("argv", "said"), [
    (["vc", "set", "research", "--borrowing", "gpus=150"],
     "invalid virtual cluster: borrowing.gpus: must be at most 100 ("),
    (["vc", "set", "default", "--quota", "gpus=5"], "quota: may not be set for the default virtual cluster"),
    (["vc", "set", "lab", "--quota", "gpus=60"], "the quotas of gpus add up to 110%, more than 100%"),
    (["vc", "delete", "research"], "virtual cluster research still has waiting or running jobs"),
    (["vc", "delete", "nope"], "virtual cluster 'nope' does not exist"),
])
async def test_paiq_vc_says_the_apis_refusal_in_one_line_and_exits_1(paiq: Any, argv: list[str], said: str) -> None:
    code, out, err = await paiq(*argv)
    assert (code, out) == (1, "")
    assert err.startswith(f"paiq: {said}") and err.count("\n") == 1, err
