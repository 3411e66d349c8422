"""An application token reads and runs jobs, but changes no user, group, token, virtual cluster or notification
setting (``403 ForbiddenUserError``, as OpenPAI v1.8's ``checkNotApplication``), on v1 and v2 alike: each such
route, through the real app, users and store, with an administrator's application token (so that only the
token's kind refuses it), and what it would have changed left as it was."""

from __future__ import annotations

from typing import Any

import pytest

from services.submit.routes.table import ROUTES
from tests.integration import test_v2_access_api
from tests.integration.test_v2_access_api import Api

pytestmark = pytest.mark.integration
api = test_v2_access_api.api  # the fixture: the real app and store, with an admin (boss) and a user (alice)

REFUSAL = {"code": "ForbiddenUserError", "message": "Application token is not allowed to do this operation."}
VC = {"quota": {"cpus": 10, "memory": 10, "gpus": 10}}

# Every route that changes a user, a group, a token, a virtual cluster or notification settings (and the few reads
# OpenPAI v1.8 refused an application token), with a body the administrator's own session token would have had
# accepted.
CASES: list[tuple[str, str, Any]] = [
    # v1
    ("PUT", "/api/v1/user", {"username": "carol", "password": "carol-password"}),
    ("DELETE", "/api/v1/user", {"username": "alice"}),
    ("PUT", "/api/v1/virtual-clusters/{vc}", VC),
    ("DELETE", "/api/v1/virtual-clusters/{vc}", None),
    ("POST", "/api/v1/notifications/subscriptions", {"channel": "email", "kinds": ["failed"]}),
    ("DELETE", "/api/v1/notifications/subscriptions/{id}", None),
    ("PUT", "/api/v1/notifications/email", {"email": "mallory@example.com"}),
    # v2: users (the two reads of every user and a group's users refused it too already, as OpenPAI v1.8)
    ("GET", "/api/v2/users", None),
    ("POST", "/api/v2/users", {"username": "carol", "password": "carol-password"}),
    ("PUT", "/api/v2/users", {"data": {"username": "alice", "email": "m@example.com"}}),
    ("PUT", "/api/v2/users/me", {"data": {"username": "boss", "email": "m@example.com"}}),
    ("DELETE", "/api/v2/users/{user}", None),
    ("PUT", "/api/v2/users/{user}/password", {"newPassword": "mallory-password"}),
    ("PUT", "/api/v2/users/{user}/email", {"email": "m@example.com"}),
    ("PUT", "/api/v2/users/{user}/extension", {"extension": {"k": 1}}),
    ("PUT", "/api/v2/users/{user}/admin", {"admin": True}),
    ("PUT", "/api/v2/users/{user}/virtualcluster", {"virtualCluster": ["research"]}),
    ("PUT", "/api/v2/users/{user}/grouplist", {"grouplist": []}),
    ("PUT", "/api/v2/users/{user}/group", {"groupname": "ml"}),
    ("DELETE", "/api/v2/users/{user}/group", {"groupname": "ml"}),
    # v2: groups
    ("POST", "/api/v2/groups", {"groupname": "evil"}),
    ("PUT", "/api/v2/groups", {"data": {"groupname": "ml", "description": "x"}}),
    ("DELETE", "/api/v2/groups/{group}", None),
    ("GET", "/api/v2/groups/{group}/userlist", None),
    ("PUT", "/api/v2/groups/{group}/extension", {"extension": {"k": 1}}),
    ("PUT", "/api/v2/groups/{group}/extension/{key1}", {"data": 1}),
    ("PUT", "/api/v2/groups/{group}/extension/{key1}/{key2}", {"data": 1}),
    ("PUT", "/api/v2/groups/{group}/extension/{key1}/{key2}/{key3}", {"data": 1}),
    ("PUT", "/api/v2/groups/{group}/extension/{key1}/{key2}/{key3}/{key4}", {"data": 1}),
    ("PUT", "/api/v2/groups/{group}/description", {"description": "x"}),
    ("PUT", "/api/v2/groups/{group}/externalname", {"externalName": "x"}),
    # v2: tokens and sessions
    ("DELETE", "/api/v2/authn/basic/logout", None),
    ("GET", "/api/v2/tokens", None),
    ("POST", "/api/v2/tokens/application", None),
    ("DELETE", "/api/v2/tokens/{token}", None),
    # v2: virtual clusters
    ("PUT", "/api/v2/virtual-clusters/{vc}", VC),
    ("DELETE", "/api/v2/virtual-clusters/{vc}", None),
    ("PUT", "/api/v2/virtual-clusters/{vc}/status", {"vcStatus": "stopped"}),
]
VALUES = {"vc": "research", "id": "nope", "user": "alice", "group": "ml", "key1": "a", "key2": "b", "key3": "c",
          "key4": "d", "token": "nope"}


def singular(path: str) -> str:
    """OpenPAI v1.8's other mount of a users or groups route (``/api/v2/user...``, ``/api/v2/group...``)."""
    return path.replace("/api/v2/users", "/api/v2/user").replace("/api/v2/groups", "/api/v2/group")


@pytest.fixture
async def app_api(api: Api) -> Api:
    """The fixture's API with an administrator's application token ("app") and a group ``ml``."""
    await api.call("POST", "/api/v2/groups", "boss", {"groupname": "ml"}, status=201)
    api.tokens["app"] = (await api.call("POST", "/api/v2/tokens/application", "boss",
                                        schema="ApplicationToken"))["token"]
    return api


@pytest.mark.parametrize(("method", "path", "body"), CASES, ids=[f"{m} {p}" for m, p, _ in CASES])
async def test_an_application_token_changes_nothing(app_api: Api, method: str, path: str, body: Any) -> None:
    for each in dict.fromkeys((path, singular(path))):
        answer = await app_api.call(method, each.format(**VALUES), "app", body, status=403)
        assert answer == REFUSAL, (method, each)


async def test_the_cases_are_every_route_declared_for_people_only() -> None:
    declared = {(r.method, r.path) for r in ROUTES if r.auth == "person"}
    listed = {(m, p) for m, p, _ in CASES} | {(m, singular(p)) for m, p, _ in CASES}
    assert declared == listed & {(r.method, r.path) for r in ROUTES}


async def test_an_application_token_leaves_the_e_mail_address_as_it_was(app_api: Api) -> None:
    await app_api.call("PUT", "/api/v1/notifications/email", "boss", {"email": "boss@example.com"})
    await app_api.call("PUT", "/api/v1/notifications/email", "app", {"email": "mallory@example.com"}, status=403)
    # and it still reads: the address, the user, the subscriptions
    subs = await app_api.call("GET", "/api/v1/notifications/subscriptions", "app", schema="Subscriptions")
    assert subs["email"] == "boss@example.com"
    assert (await app_api.call("GET", "/api/v2/users/me", "app", schema="V2User"))["email"] == "boss@example.com"
    await app_api.call("GET", "/api/v1/user", "app", schema="UserList")
