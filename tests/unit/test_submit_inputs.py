"""What submit quotes back and which names it takes: user names that a URL can reach, and the
X-Warning header that must stay one printable ASCII line whatever keys a job had."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from pymongo.errors import ServerSelectionTimeoutError

from services.submit.app import error_middleware
from services.submit.errors import ApiError
from services.submit.routes.jobs import MAX_WARNING_HEADER, warning_header
from services.submit.users import check_user_name
from shared.admission.validation import Accepted, validate_job_config
from shared.errors import BusError, StoreError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("name", "taken"), [
    ("alice", True), ("a.b", True), (".a", True), ("a.", True), ("a-b_c.9", True), ("a" * 64, True),
    (".", False), ("..", False), ("...", False),  # a URL's path normalization removes "." and ".."
    ("", False), ("a" * 65, False), ("a b", False), ("a/b", False), ("ü", False), ("a\n", False),
])
def test_user_names(name: str, taken: bool) -> None:
    if taken:
        assert check_user_name(name) == name
        return
    with pytest.raises(ApiError) as info:
        check_user_name(name)
    assert info.value.status == 400 and "user name" in info.value.message


def _warnings_of(*keys: str) -> tuple[str, ...]:
    config = {"jobName": "j", "image": "busybox", "taskRoles": [
        {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "command": "true"}]}
    result = validate_job_config({**config, **dict.fromkeys(keys, 1)})
    assert isinstance(result, Accepted), result
    return result.warnings


@pytest.mark.parametrize(("key", "shown"), [
    ("plain", "plain: unknown field"),
    ("evil\r\nSet-Cookie: x=1", "evil\\u000d\\u000aSet-Cookie: x=1"),
    ("ключ", "\\u043a\\u043b\\u044e\\u0447"),
    ("caf\u00e9\u2028", "caf\\xe9\\u2028"),
    ("k" * 1000, "k" * 64 + "..."),
])
def test_the_warning_header_is_one_printable_ascii_line(key: str, shown: str) -> None:
    header = warning_header(_warnings_of(key))
    assert shown in header
    assert header.isascii() and header.isprintable() and len(header) <= MAX_WARNING_HEADER


def test_the_warning_header_is_bounded_however_many_keys() -> None:
    warnings = _warnings_of(*(f"{i:04d}" + "\u2028" * 200 for i in range(500)))
    assert len(warnings) == 21 and "480 more unknown fields" in warnings[-1]
    header = warning_header(warnings)
    assert len(header) <= MAX_WARNING_HEADER and header.isascii() and header.isprintable()
    assert header.startswith("0000")


@pytest.mark.parametrize(("error", "status", "code"), [
    (StoreError("updating job j failed"), 500, "UnknownError"),
    (KeyError("bug"), 500, "UnknownError"),
    (BusError("publishing job.submitted was not confirmed"), 503, "ServiceUnavailableError"),
    (ServerSelectionTimeoutError("127.0.0.1:27017: connection refused"), 503, "ServiceUnavailableError"),
])
async def test_a_failure_on_paiqs_side_is_500_or_503_for_an_outage_never_a_trace(
        error: Exception, status: int, code: str) -> None:
    async def handler(_: web.Request) -> web.StreamResponse:
        raise error

    answer = await error_middleware(make_mocked_request("GET", "/api/v1/jobs"), handler)
    assert isinstance(answer, web.Response) and answer.status == status
    body = json.loads(answer.text or "")
    assert body["code"] == code and "Traceback" not in body["message"] and "127.0.0.1" not in body["message"]
    assert ("Retry-After" in answer.headers) == (status == 503)


async def test_a_store_error_caused_by_an_outage_is_503() -> None:
    async def handler(_: web.Request) -> web.StreamResponse:
        try:
            raise ServerSelectionTimeoutError("no servers")
        except ServerSelectionTimeoutError as e:
            raise StoreError("updating job j failed") from e

    answer = await error_middleware(make_mocked_request("POST", "/api/v1/user/u/jobs"), handler)
    assert isinstance(answer, web.Response) and answer.status == 503
