"""OpenPAI v1.8's /api/v2 routes other than jobs, through the real app, users and store (a MongoDB-wire
server): each answer's status and keys against OpenPAI v1.8's shape (the document's schema, generated from
the models whose keys are OpenPAI's), and the 401/403/404/409 OpenPAI answered."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pymongo import AsyncMongoClient

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.openapi import document
from services.submit.users import Users
from shared.bus.memory import MemoryBus
from shared.db.store import Store
from shared.scheduling.vclusters import Quota, VirtualCluster
from shared.settings.model import Settings
from tests.infra import HASH_ROUNDS
from tests.unit.factories import make_node

pytestmark = pytest.mark.integration

DOC = document()
STORAGES = """storages:
  - {name: team, hostPath: /mnt/team, mountPath: /data/team, groups: [ml]}
  - {name: open, hostPath: /mnt/open, mountPath: /data/open, readOnly: true}
"""


def check(body: Any, schema: str) -> None:
    jsonschema.validate(body, {"$ref": f"#/components/schemas/{schema}", "components": DOC["components"]})


class Api:
    def __init__(self, client: TestClient[Any, Any]) -> None:
        self.client = client
        self.tokens: dict[str, str] = {}

    async def call(self, method: str, path: str, who: str | None = None, body: Any = None,
                   status: int = 200, schema: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        resp = await self.client.request(method, path, headers=headers, json=body)
        answer = await resp.json()
        assert resp.status == status, (method, path, resp.status, answer)
        check(answer, schema or ("Error" if status >= 400 else "Message"))
        return answer


@pytest.fixture
async def api(mongo_uri: str, tmp_path: Path) -> AsyncIterator[Api]:
    (tmp_path / "storages.yaml").write_text(STORAGES)
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    database = f"v2access_{uuid.uuid4().hex[:8]}"
    store = Store(client, database)
    await store.ensure_indexes()
    await store.put_vc(VirtualCluster(name="research", quota=Quota(cpus=50, memory=50, gpus=50), users=("boss",),
                                      groups=("ml",)))
    await store.upsert_node(make_node("n1", cpus=16, memory_mb=65536, gpus=["V100"] * 4))
    users = Users(store, rounds=HASH_ROUNDS)
    await users.create("boss", "boss-password", admin=True)
    await users.create("alice", "alice-password", admin=False)
    deps = SubmitDeps(settings=Settings.from_env({"PAIQ_STORAGE_CONFIG": str(tmp_path / "storages.yaml")}),
                      store=store, bus=MemoryBus(), users=users)
    async with TestClient(TestServer(create_app(deps))) as test_client:
        api = Api(test_client)
        for who in ("boss", "alice"):
            login = await api.call("POST", "/api/v2/authn/basic/login",
                                   body={"username": who, "password": f"{who}-password"}, schema="Login")
            api.tokens[who] = login["token"]
        yield api
    deps.cpu.shutdown()
    await client.drop_database(database)
    await client.close()


async def test_info_and_login(api: Api) -> None:
    info = await api.call("GET", "/api/v2/info", schema="Info")
    assert info["name"] == "PAI RESTful API" and info["authnMethod"] == "basic"
    login = await api.call("POST", "/api/v2/authn/basic/login",
                           body={"username": "alice", "password": "alice-password"}, schema="Login")
    assert set(login) == {"user", "token", "admin", "hasGitHubPAT"} and login["admin"] is False
    await api.call("POST", "/api/v2/authn/basic/login", body={"username": "alice", "password": "wrong!"},
                   status=401)


async def test_users(api: Api) -> None:
    me = await api.call("GET", "/api/v2/users/me", "alice", schema="V2User")
    assert set(me) == {"username", "grouplist", "email", "extension", "admin", "virtualCluster", "storageConfig"}
    assert me["virtualCluster"] == ["default"] and me["storageConfig"] == ["open"]
    await api.call("GET", "/api/v2/users/me", status=401)
    await api.call("GET", "/api/v2/users", "alice", status=403)
    everyone = await api.call("GET", "/api/v2/users", "boss", schema="V2UserList")
    assert [u["username"] for u in everyone] == ["alice", "boss"]
    assert everyone[1]["virtualCluster"] == ["default", "research"]
    await api.call("GET", "/api/v2/users/boss", "alice", status=403)
    await api.call("GET", "/api/v2/users/nobody", "boss", status=404)
    new = {"username": "carol", "password": "carol-password", "email": "carol@example.com",
           "virtualCluster": ["research"], "extension": {"sshKeys": []}}
    await api.call("POST", "/api/v2/users", "alice", new, status=403)
    await api.call("POST", "/api/v2/users", "boss", {**new, "virtualCluster": ["nope"]}, status=400)
    await api.call("POST", "/api/v2/users", "boss", new, status=201)
    await api.call("POST", "/api/v2/users", "boss", new, status=409)
    carol = await api.call("GET", "/api/v2/users/carol", "boss", schema="V2User")
    assert carol["email"] == "carol@example.com" and carol["virtualCluster"] == ["default", "research"]
    assert carol["extension"] == {"sshKeys": []}
    await api.call("PUT", "/api/v2/users", "boss", {"patch": True, "data": {"username": "carol",
                   "email": "c@example.com", "virtualCluster": []}}, status=201)
    carol = await api.call("GET", "/api/v2/users/carol", "boss", schema="V2User")
    assert carol["email"] == "c@example.com" and carol["virtualCluster"] == ["default"]
    await api.call("PUT", "/api/v2/users", "boss", {"data": {"username": "nobody"}}, status=404)
    await api.call("DELETE", "/api/v2/users/carol", "alice", status=403)
    await api.call("DELETE", "/api/v2/users/carol", "boss")
    await api.call("DELETE", "/api/v2/users/carol", "boss", status=404)
    await api.call("DELETE", "/api/v2/users/boss", "boss", status=403)  # admins are never removed


async def test_groups(api: Api) -> None:
    await api.call("POST", "/api/v2/groups", "alice", {"groupname": "ml"}, status=403)
    await api.call("POST", "/api/v2/groups", "boss", {"groupname": "ml", "description": "learners"}, status=201)
    await api.call("POST", "/api/v2/groups", "boss", {"groupname": "ml"}, status=409)
    await api.call("POST", "/api/v2/groups", "boss", {"groupname": "bad-name"}, status=400)
    group = await api.call("GET", "/api/v2/groups/ml", "alice", schema="V2Group")
    assert set(group) == {"groupname", "description", "externalName", "extension"}
    assert group["extension"]["acls"] == {"admin": False, "virtualClusters": ["research"], "storageConfigs": ["team"]}
    await api.call("GET", "/api/v2/groups/none", "alice", status=404)
    await api.call("GET", "/api/v2/groups", status=401)
    assert [g["groupname"] for g in await api.call("GET", "/api/v2/groups", "alice", schema="V2GroupList")] == ["ml"]
    await api.call("PUT", "/api/v2/groups", "boss", {"patch": True, "data": {"groupname": "ml",
                   "externalName": "ML"}}, status=201)
    await api.call("PUT", "/api/v2/groups", "boss", {"data": {"groupname": "none"}}, status=400)
    assert (await api.call("GET", "/api/v2/groups/ml", "boss", schema="V2Group"))["description"] == "learners"
    # a user's groups: the group's members, its VCs and storages become theirs
    await api.call("PUT", "/api/v2/users/alice/group", "boss", {"groupname": "none"}, status=404)
    await api.call("PUT", "/api/v2/users/alice/group", "alice", {"groupname": "ml"}, status=403)
    await api.call("PUT", "/api/v2/users/alice/group", "boss", {"groupname": "ml"}, status=201)
    me = await api.call("GET", "/api/v2/users/me", "alice", schema="V2User")
    assert me["grouplist"] == ["ml"] and me["virtualCluster"] == ["default", "research"]
    assert me["storageConfig"] == ["team", "open"]
    members = await api.call("GET", "/api/v2/groups/ml/userlist", "boss", schema="GroupMembers")
    assert members == [{"username": "alice", "clusterAdmin": False}]
    await api.call("GET", "/api/v2/groups/ml/userlist", "alice", status=403)
    await api.call("DELETE", "/api/v2/users/alice/group", "boss", {"groupname": "ml"}, status=201)
    assert await api.call("GET", "/api/v2/groups/ml/userlist", "boss", schema="GroupMembers") == []
    await api.call("PUT", "/api/v2/users/alice/grouplist", "boss", {"grouplist": ["ml", "none"]}, status=404)
    await api.call("PUT", "/api/v2/users/alice/grouplist", "boss", {"grouplist": ["ml"]}, status=201)
    await api.call("DELETE", "/api/v2/groups/ml", "alice", status=403)
    await api.call("DELETE", "/api/v2/groups/ml", "boss")
    await api.call("DELETE", "/api/v2/groups/ml", "boss", status=404)
    assert (await api.call("GET", "/api/v2/users/me", "alice", schema="V2User"))["grouplist"] == []


async def test_tokens(api: Api) -> None:
    listed = await api.call("GET", "/api/v2/tokens", "alice", schema="Tokens")
    assert len(listed["tokens"]) == 1
    app = await api.call("POST", "/api/v2/tokens/application", "alice", schema="ApplicationToken")
    assert app["application"] is True
    api.tokens["app"] = app["token"]
    assert len((await api.call("GET", "/api/v2/tokens", "alice", schema="Tokens"))["tokens"]) == 2
    await api.call("GET", "/api/v2/users/me", "app", schema="V2User")  # an application token reads
    assert await api.call("GET", "/api/v2/tokens/check", "app", schema="TokenCheck") == {
        "username": "alice", "admin": False, "application": True}
    await api.call("GET", "/api/v2/tokens/check", status=401)
    await api.call("GET", "/api/v2/tokens", "app", status=403)  # and manages no tokens
    await api.call("DELETE", f"/api/v2/tokens/{app['token']}", "boss", status=403)  # not the boss's
    await api.call("DELETE", f"/api/v2/tokens/{app['token']}", "alice")
    await api.call("GET", "/api/v2/users/me", "app", status=401)
    await api.call("DELETE", f"/api/v2/tokens/{listed['tokens'][0]}", "alice")  # by its listed id
    await api.call("GET", "/api/v2/users/me", "alice", status=401)
    await api.call("DELETE", "/api/v2/authn/basic/logout", "boss")
    await api.call("GET", "/api/v2/tokens", "boss", status=401)


async def test_virtual_clusters_storages_and_skus(api: Api) -> None:
    await api.call("GET", "/api/v2/virtual-clusters", status=401)
    vcs = await api.call("GET", "/api/v2/virtual-clusters", "alice", schema="V2VirtualClusters")
    assert sorted(vcs) == ["default", "research"]
    research = await api.call("GET", "/api/v2/virtual-clusters/research", "alice", schema="V2VirtualCluster")
    assert research["capacity"] == 50 and research["resourcesTotal"]["GPUs"] == 2
    await api.call("GET", "/api/v2/virtual-clusters/none", "alice", status=404)
    body = {"quota": {"cpus": 10, "memory": 10, "gpus": 25}, "groups": ["ml"]}
    await api.call("PUT", "/api/v2/virtual-clusters/small", "alice", body, status=403)
    await api.call("PUT", "/api/v2/virtual-clusters/small", "boss", body, status=201, schema="VcDone")
    await api.call("DELETE", "/api/v2/virtual-clusters/small", "boss", status=201, schema="VcDone")
    await api.call("DELETE", "/api/v2/virtual-clusters/small", "boss", status=404)
    listed = await api.call("GET", "/api/v2/storages", "alice", schema="Storages")
    assert listed == {"storages": [{"name": "open", "share": True, "volumeName": "open"}]}
    one = await api.call("GET", "/api/v2/storages/open", "alice", schema="Storage")
    assert one["readOnly"] is True and one["data"]["mountPath"] == "/data/open"
    await api.call("GET", "/api/v2/storages/team", "alice", status=403)
    await api.call("GET", "/api/v2/storages/none", "alice", status=404)
    await api.call("GET", "/api/v2/storages", status=401)
    skus = await api.call("GET", "/api/v2/cluster/sku-types", "alice", schema="SkuTypes")
    assert skus == {"V100": {"gpu": 1, "cpu": 4, "memory": 16384}}
    await api.call("GET", "/api/v2/cluster/sku-types?vc=none", "alice", status=404)


async def test_profile_changes(api: Api) -> None:
    me = {"patch": True, "data": {"username": "alice", "email": "a@example.com", "extension": {"k": 1}}}
    await api.call("PUT", "/api/v2/users/me", "alice", {**me, "data": {**me["data"], "username": "boss"}},
                   status=403)
    await api.call("PUT", "/api/v2/users/me", "alice", me, status=201)
    await api.call("PUT", "/api/v2/users/alice/extension", "alice", {"extension": {"$odd.key": [1]}}, status=201)
    await api.call("PUT", "/api/v2/users/alice/email", "boss", {"email": "b@example.com"}, status=201)
    await api.call("PUT", "/api/v2/users/boss/email", "alice", {"email": "x@example.com"}, status=403)
    shown = await api.call("GET", "/api/v2/users/me", "alice", schema="V2User")
    assert shown["email"] == "b@example.com" and shown["extension"] == {"k": 1, "$odd.key": [1]}
    app = await api.call("POST", "/api/v2/tokens/application", "alice", schema="ApplicationToken")
    api.tokens["app"] = app["token"]
    await api.call("PUT", "/api/v2/users/me", "app", me, status=403)  # an application token changes nothing
    wrong = {"patch": True, "data": {"username": "alice", "newPassword": "new-password", "oldPassword": "nope!!"}}
    await api.call("PUT", "/api/v2/users/me", "alice", wrong, status=403)
    right = {"patch": True, "data": {"username": "alice", "newPassword": "new-password",
                                     "oldPassword": "alice-password"}}
    await api.call("PUT", "/api/v2/users/me", "alice", right, status=201)
    await api.call("GET", "/api/v2/users/me", "alice", status=401)  # the session ended
    await api.call("GET", "/api/v2/users/me", "app", schema="V2User")  # the application token stays
    await api.call("PUT", "/api/v2/users/alice/password", "boss", {"newPassword": "alice-password"}, status=201)
    api.tokens["alice"] = (await api.call("POST", "/api/v2/authn/basic/login", body={
        "username": "alice", "password": "alice-password"}, schema="Login"))["token"]
    await api.call("PUT", "/api/v2/users/alice/password", "alice", {"newPassword": "x-password",
                   "oldPassword": "wrong-one"}, status=403)
    await api.call("PUT", "/api/v2/users/alice/admin", "alice", {"admin": True}, status=403)
    await api.call("PUT", "/api/v2/users/boss/admin", "boss", {"admin": False}, status=403)  # the last admin
    await api.call("PUT", "/api/v2/users/alice/virtualcluster", "boss", {"virtualCluster": ["research"]},
                   status=201)
    assert (await api.call("GET", "/api/v2/users/me", "alice", schema="V2User"))["virtualCluster"] == [
        "default", "research"]
    await api.call("PUT", "/api/v2/users/alice/virtualcluster", "boss", {"virtualCluster": ["nope"]}, status=400)
    await api.call("PUT", "/api/v2/users/nobody/virtualcluster", "boss", {"virtualCluster": []}, status=404)
    await api.call("PUT", "/api/v2/users/alice/admin", "boss", {"admin": True}, status=201)
    assert (await api.call("GET", "/api/v2/users/alice", "boss", schema="V2User"))["admin"] is True
