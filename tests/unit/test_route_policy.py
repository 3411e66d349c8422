"""What the route table declares about who may call a route: every route that changes a user, a group, a token,
a virtual cluster or notification settings is for people only (``auth="person"``: an application token is
refused, v1 and v2 alike), and no other route is, but for the few reads OpenPAI v1.8 refused an application
token."""

from __future__ import annotations

import re

import pytest

from services.submit.contract.route import Route
from services.submit.routes.table import ROUTES

pytestmark = pytest.mark.unit

# The state an application token may not change: users (v1's /api/v1/user, v2's users and their singular
# aliases), groups, tokens and sessions, virtual clusters, notification subscriptions and the e-mail address.
CHANGES_PEOPLE = re.compile(r"^/api/v1/(user|virtual-clusters/.*|notifications/.*)$"
                            r"|^/api/v2/(users?|groups?|tokens|authn/basic/logout|virtual-clusters)(/.*)?$")
# Reads OpenPAI v1.8 refused an application token (checkNotApplication): its tokens, every user, a group's users.
PERSON_READS = {"/api/v2/tokens", "/api/v2/users", "/api/v2/user", "/api/v2/groups/{group}/userlist",
                "/api/v2/group/{group}/userlist"}


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_a_route_is_for_people_only_exactly_when_it_changes_users_groups_tokens_vcs_or_notifications(
        route: Route) -> None:
    changes = route.method != "GET" and bool(CHANGES_PEOPLE.match(route.path))
    assert (route.auth == "person") == (changes or (route.method == "GET" and route.path in PERSON_READS))


def test_a_route_for_people_only_says_so_and_lists_401_and_403() -> None:
    people = [r for r in ROUTES if r.auth == "person"]
    assert len(people) > 40  # v1 and v2, with v2's singular aliases
    for route in people:
        op = route.operation()
        assert op["security"] == [{"bearer": []}] and "application token" in op["description"]
        assert {"401", "403"} <= set(op["responses"])
