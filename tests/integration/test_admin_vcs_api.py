"""An administrator may use every virtual cluster (as OpenPAI: admins have access to all VCs), and every answer
that says which VCs a user may use agrees with what submit admits: v1 and v2 submit, v1 and v2 users, through
the real app, users and store."""

from __future__ import annotations

import pytest

from tests.integration import test_v2_access_api
from tests.integration.test_v2_access_api import Api
from tests.integration.test_v2_admin_api import submit_v2, v1_job

pytestmark = pytest.mark.integration
api = test_v2_access_api.api  # the fixture: the real app and store, with an admin (boss) and a user (alice)


async def test_an_admin_submits_into_a_vc_that_does_not_name_them_and_is_told_so(api: Api) -> None:
    await api.call("PUT", "/api/v1/virtual-clusters/vc-alice", "boss",
                   {"quota": {"cpus": 10, "memory": 10, "gpus": 10}, "users": ["alice"]})
    # what the users answers say the admin may use: every VC
    v2 = await api.call("GET", "/api/v2/users/boss", "boss", schema="V2User")
    v1 = await api.call("GET", "/api/v1/user/boss", "boss", schema="User")
    listed = {u["username"]: u for u in await api.call("GET", "/api/v1/user", "boss", schema="UserList")}
    every = ["default", "research", "vc-alice"]
    assert sorted(v2["virtualCluster"]) == sorted(v1["virtualCluster"]) == every
    assert sorted(v1["extension"]["virtualCluster"]) == sorted(listed["boss"]["virtualCluster"]) == every
    # and submit agrees: v1 POST and PUT, v2
    await api.call("POST", "/api/v1/user/boss/jobs", "boss", v1_job("by-post", "vc-alice"), status=202,
                   schema="Message")
    await api.call("PUT", "/api/v1/user/boss/jobs/by-put", "boss", v1_job("by-put", "vc-alice"), status=202,
                   schema="Message")
    await submit_v2(api, "boss", "by-v2", "vc-alice", 202)
    # a user who is not named is still refused, and told the VCs they may use
    alice = await api.call("GET", "/api/v2/users/alice", "boss", schema="V2User")
    assert alice["virtualCluster"] == ["default", "vc-alice"]
    await api.call("POST", "/api/v1/user/alice/jobs", "alice", v1_job("no", "research"), status=403)
    await submit_v2(api, "alice", "no", "research", 403)
