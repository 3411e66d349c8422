"""Issue 17, the HTTP layer: no bad request gets a 500, a stack trace or aiohttp's own text.

Each case is sent to a real platform as an attacker would (with aiohttp's client, or as raw bytes where
no client would send them) and must be refused with a 4xx whose body is OpenPAI's ``{code, message}``
JSON, naming the problem without echoing the offending input. After all of them the platform still
answers ordinary requests.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.e2e.conftest import ALL_IN_ONE_ONLY, job_config, raw, token_of
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, unique

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), ALL_IN_ONE_ONLY]  # the API's own handling

Answer = tuple[int, Any, dict[str, str]]
FORM = "application/x-www-form-urlencoded"
BIG_TOKEN = "Bearer " + "A" * 1_000_000


def refused(answer: Answer, status: int, code: str, *, not_echoed: tuple[str, ...] = (),
            says: str = "") -> str:
    """The answer is ``status`` with OpenPAI's ``{code, message}`` JSON naming the problem (``says``), and
    neither its body nor its headers hold any of ``not_echoed``. Returns the message."""
    got, body, headers = answer
    assert got == status, answer
    assert headers.get("Content-Type", "").startswith("application/json"), answer
    assert isinstance(body, dict) and set(body) == {"code", "message"}, answer
    assert body["code"] == code and isinstance(body["message"], str) and body["message"], answer
    assert says in body["message"], answer
    seen = json.dumps(body, ensure_ascii=False) + json.dumps(headers, ensure_ascii=False)
    for text in not_echoed:
        assert text not in seen, f"the answer echoes {text[:40]!r}: {str(answer)[:500]}"
    return str(body["message"])


async def send_bytes(platform: Platform, data: bytes) -> Answer:
    """One request as raw bytes (what no HTTP client would send); the server's answer, parsed."""
    host, port = platform.api.rsplit("//", 1)[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 20)  # every answer here closes the connection
    finally:
        writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    text = payload.decode("utf-8", "replace")
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    return int(status_line.split(" ")[1]), body, headers


def request_bytes(method: str, path: str, *headers: bytes, body: bytes = b"") -> bytes:
    head = [f"{method} {path} HTTP/1.1".encode(), b"Host: paiq", b"Connection: close", *headers]
    if body:
        head.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def multipart(*parts: bytes, boundary: bytes = b"xyz") -> bytes:
    return b"".join(b"--" + boundary + b"\r\n" + p + b"\r\n" for p in parts) + b"--" + boundary + b"--\r\n"


def field(name: str, value: bytes, extra: bytes = b"") -> bytes:
    return b'Content-Disposition: form-data; name="' + name.encode() + b'"' + extra + b"\r\n\r\n" + value


# --- forms: POST /api/v1/token and PUT /api/v1/user ------------------------------------------------

FORM_CASES = [
    pytest.param(FORM, b"username=\xff\xfealice&password=\xc3\x28secret", "not valid UTF-8",
                 ("\ufffd", "\udcff", "alice", "secret"), id="urlencoded-invalid-utf8"),
    pytest.param(FORM, b"username=%ff%fealice&password=x", "do not decode as UTF-8", ("\ufffd", "alice"),
                 id="urlencoded-escapes-not-utf8"),
    pytest.param(FORM, b"&".join(b"f%d=v" % i for i in range(500)), "at most 16 fields", ("f499",),
                 id="urlencoded-too-many-fields"),
    pytest.param(FORM, b"username=" + b"L" * 100_000, "at most 4096 bytes", ("LLLLLLLL",),
                 id="urlencoded-field-too-large"),
    pytest.param(FORM, b"username=alice&username=bob", "more than once", ("bob",), id="urlencoded-repeated-field"),
    pytest.param(f"{FORM}; charset=x-nonsense-42", b"username=alice", "send the body as UTF-8", (),
                 id="urlencoded-unknown-charset"),
    pytest.param("multipart/form-data", multipart(field("username", b"alice")), "boundary", ("alice",),
                 id="multipart-without-boundary"),
    pytest.param("multipart/form-data; boundary=xyz", b"G4RBAGE\r\n" * 1000, "boundary", ("G4RBAGE",),
                 id="multipart-garbage"),
    pytest.param("multipart/form-data; boundary=xyz", multipart(field("username", b"al")).replace(b"--xyz--", b""),
                 "boundary", (), id="multipart-not-closed"),
    pytest.param("multipart/form-data; boundary=xyz", multipart(field("username", b"\xff\xfeal1ce")),
                 "not valid UTF-8", ("al1ce", "\ufffd"), id="multipart-invalid-utf8"),
    pytest.param("multipart/form-data; boundary=xyz",
                 multipart(field("password", b"hunter2hunter2", b'; filename="passwd"')), "text fields only",
                 ("hunter2",), id="multipart-file"),
    pytest.param("multipart/form-data; boundary=xyz", multipart(*(field(f"f{i}", b"v") for i in range(40))),
                 "at most 16 fields", ("f39",), id="multipart-too-many-fields"),
    pytest.param("multipart/form-data; boundary=xyz", multipart(field("username", b"M" * 50_000)),
                 "at most 4096 bytes", ("MMMMMMMM",), id="multipart-field-too-large"),
    pytest.param("multipart/form-data; boundary=xyz",
                 multipart(b"Content-Type: multipart/mixed; boundary=in\r\n\r\n--in\r\n\r\nx\r\n--in--"),
                 "may not itself be multipart", (), id="multipart-nested"),
]


@pytest.mark.parametrize(("content_type", "body", "says", "not_echoed"), FORM_CASES)
@pytest.mark.parametrize("route", ["POST /api/v1/token", "PUT /api/v1/user"])
async def test_a_bad_form_is_a_400_naming_what_is_wrong(platform: Platform, admin_token: str, route: str,
                                                        content_type: str, body: bytes, says: str,
                                                        not_echoed: tuple[str, ...]) -> None:
    method, path = route.split(" ")
    headers = {"Content-Type": content_type, "Authorization": f"Bearer {admin_token}"}
    answer = await raw(platform, method, path, data=body, headers=headers)
    refused(answer, 400, "InvalidParametersError", says=says, not_echoed=not_echoed)


async def test_forms_still_log_in_and_create_users(platform: Platform, admin_token: str) -> None:
    user = unique("form")
    status, body, _ = await raw(platform, "PUT", "/api/v1/user", data={"username": user, "password": "form-pass"},
                                headers={"Authorization": f"Bearer {admin_token}"})
    assert status == 201, body
    status, body, _ = await raw(platform, "POST", "/api/v1/token",
                                data=f"username={user}&password=form-pass&expiration=60".encode(),
                                headers={"Content-Type": FORM})
    assert (status, body["user"]) == (200, user)
    status, body, _ = await raw(platform, "POST", "/api/v1/token", headers={
        "Content-Type": "multipart/form-data; boundary=b0undary"}, data=multipart(
            field("username", user.encode()), field("password", b"form-pass"), boundary=b"b0undary"))
    assert (status, body["user"]) == (200, user)


# --- JSON bodies --------------------------------------------------------------------------------------

JSON_CASES = [
    pytest.param(b'{"username": "\xff\xfeadmin", "password": "x"}', "application/json", "not valid UTF-8",
                 ("\ufffd", "\udcff"), id="invalid-utf8"),
    pytest.param(b'{"username": "admin", "password": "\\udfff\\udfffpw"}', "application/json",
                 "unpaired UTF-16 surrogate", ("\udfff",), id="lone-surrogate-escape"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "application/json", "nested too deeply", ("[[[[",),
                 id="nested-too-deeply"),
    pytest.param(b'{"username": "admin", "password": NaN}', "application/json", "NaN", (), id="nan"),
    pytest.param(b'{"username": "admin", "password": ' + b"7" * 5000 + b"}", "application/json",
                 "thousands of digits", ("77777777",), id="huge-integer"),
    pytest.param(b'{"username": "adm', "application/json", "not valid JSON", ("adm",), id="truncated"),
    pytest.param(b"", "application/json", "empty", (), id="empty"),
    pytest.param(b'["admin"]', "application/json", "JSON object", (), id="not-an-object"),
    pytest.param(b'{"username": "admin"}', "application/json; charset=x-nonsense-42", "UTF-8", (),
                 id="unknown-charset"),
    pytest.param(b"not json at all", "text/plain", "not valid JSON", ("at all",), id="wrong-content-type"),
]


@pytest.mark.parametrize(("body", "content_type", "says", "not_echoed"), JSON_CASES)
@pytest.mark.parametrize("route", ["POST /api/v1/token", "PUT /api/v1/user", "DELETE /api/v1/user",
                                   "PUT /api/v1/virtual-clusters/hardened"])
async def test_a_bad_json_body_is_a_400_naming_what_is_wrong(platform: Platform, admin_token: str, route: str,
                                                             body: bytes, content_type: str, says: str,
                                                             not_echoed: tuple[str, ...]) -> None:
    method, path = route.split(" ")
    answer = await raw(platform, method, path, data=body,
                       headers={"Content-Type": content_type, "Authorization": f"Bearer {admin_token}"})
    refused(answer, 400, "InvalidParametersError", says=says, not_echoed=not_echoed)


@pytest.mark.parametrize(("body", "says", "not_echoed"), [
    pytest.param(b'{"username": "admin", "password": "x", "expiration": 1e400}', "expiration", (), id="infinite"),
    pytest.param(b'{"username": "admin", "password": "x", "expiration": true}', "expiration", (), id="boolean"),
    pytest.param(b'{"username": "admin", "password": "x", "expiration": "' + b"9" * 5000 + b'"}', "expiration",
                 ("99999999",), id="5000-digit-string"),
    pytest.param(b'{"username": "admin", "password": "x", "expiration": 1.5}', "expiration", (), id="fraction"),
    pytest.param(b'{"username": "admin", "password": "x", "expiration": 0}', "expiration", (), id="zero"),
    pytest.param(b'{"username": "admin", "password": "' + b"p" * 100 + b'"}', "at most 72 bytes", ("pppppppp",),
                 id="password-over-bcrypt-limit"),
    pytest.param(b'{"username": "' + b"no such user!" * 40 + b'", "password": "x"}', "user name",
                 ("no such user!",), id="long-odd-user-name"),
    pytest.param(b'{"username": "admin", "password": ["x"]}', "password", (), id="password-not-a-string"),
])
async def test_token_fields_out_of_range_are_400(platform: Platform, body: bytes, says: str,
                                                 not_echoed: tuple[str, ...]) -> None:
    answer = await raw(platform, "POST", "/api/v1/token", data=body, headers={"Content-Type": "application/json"})
    refused(answer, 400, "InvalidParametersError", says=says, not_echoed=not_echoed)


async def test_virtual_cluster_refusals_name_fields_without_pydantic_text(platform: Platform,
                                                                         admin_token: str) -> None:
    secret_key = "k3y" * 100
    answer = await raw(platform, "PUT", "/api/v1/virtual-clusters/hardened", headers={
        "Authorization": f"Bearer {admin_token}"}, json={"quota": {"cpus": "lots", "gpus": 101}, secret_key: 1})
    message = refused(answer, 400, "InvalidParametersError", says="quota.cpus: must be a number",
                      not_echoed=(secret_key, "lots", "pydantic", "Input should", "type=", "errors.pydantic.dev"))
    assert "quota.gpus: must be at most 100" in message and "is not a field of a virtual cluster" in message


# --- methods: 405 with Allow ----------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("PATCH", "/api/v1/jobs", "GET, HEAD"),
    ("DELETE", "/api/v1/token", "POST"),
    ("GET", "/api/v1/token", "POST"),
    ("POST", "/api/v1/user", "DELETE, GET, HEAD, PUT"),
    ("PATCH", "/api/v1/user/someone/jobs/some-job", "DELETE, GET, HEAD, PUT"),
    ("OPTIONS", "/api/v1/virtual-clusters/default", "DELETE, GET, HEAD, PUT"),
    ("POST", "/api/v1/user/someone/jobs/some-job/config", "GET, HEAD"),
    ("TRACE", "/healthz", "GET, HEAD"),
])
async def test_a_method_not_allowed_is_405_with_allow(platform: Platform, method: str, path: str,
                                                      allowed: str) -> None:
    answer = await raw(platform, method, path)
    message = refused(answer, 405, "MethodNotAllowedError", says=allowed)
    assert answer[2]["Allow"] == allowed and method in message


# --- what aiohttp's parser refuses: sizes, bytes that are not HTTP ----------------------------------------

async def test_a_1mb_authorization_header_is_431_and_not_echoed(platform: Platform) -> None:
    answer = await raw(platform, "GET", "/api/v1/whoami", headers={"Authorization": BIG_TOKEN})
    refused(answer, 431, "RequestHeaderFieldsTooLargeError", says="8190 bytes", not_echoed=("AAAAAAAA",))


@pytest.mark.parametrize(("path", "headers", "status", "code", "says", "not_echoed"), [
    pytest.param("/api/v1/jobs?username=" + "u" * 100_000, {}, 431, "RequestHeaderFieldsTooLargeError",
                 "8190 bytes", ("uuuuuuuu",), id="100kb-url"),
    pytest.param("/api/v1/" + "p" * 100_000, {}, 431, "RequestHeaderFieldsTooLargeError", "8190 bytes",
                 ("pppppppp",), id="100kb-path"),
    pytest.param("/api/v1/jobs", {f"X-Many-{i}": "h34der" for i in range(300)}, 431,
                 "RequestHeaderFieldsTooLargeError", "at most 128 headers", ("h34der", "X-Many"), id="300-headers"),
    pytest.param("/api/v1/jobs", {"X-Big": "b" * 20_000}, 431, "RequestHeaderFieldsTooLargeError", "8190 bytes",
                 ("bbbbbbbb",), id="20kb-custom-header"),
    pytest.param("/api/v1/jobs", {"C" * 10_000: "v"}, 431, "RequestHeaderFieldsTooLargeError", "8190 bytes",
                 ("CCCCCCCC",), id="10kb-header-name"),
    pytest.param("/api/v1/jobs", {"Cookie": "c=" + "k" * 9000}, 431, "RequestHeaderFieldsTooLargeError",
                 "8190 bytes", ("kkkkkkkk",), id="9kb-cookie"),
    pytest.param("/api/v1/jobs", {"Expect": "bogus-3xp3ct"}, 417, "InvalidParametersError", "100-continue",
                 ("3xp3ct",), id="unknown-expect"),
])
async def test_oversized_or_refused_headers_and_urls_are_json(platform: Platform, path: str,
                                                              headers: dict[str, str], status: int, code: str,
                                                              says: str, not_echoed: tuple[str, ...]) -> None:
    answer = await raw(platform, "GET", path, headers=headers)
    refused(answer, status, code, says=says, not_echoed=not_echoed)


@pytest.mark.parametrize(("data", "status", "code", "says", "not_echoed"), [
    pytest.param(b"G3T@ /api/v1/jobs HTTP/1.1\r\nHost: paiq\r\n\r\n", 400, "InvalidParametersError", "HTTP method",
                 ("G3T@",), id="bad-method"),
    pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64, 400, "InvalidParametersError",
                 "HTTP method", (), id="tls-on-the-http-port"),
    pytest.param(b"GET /api/v1/jobs HTTP/7.5\r\nHost: paiq\r\n\r\n", 400, "InvalidParametersError",
                 "request line", ("7.5",), id="bad-version"),
    pytest.param(b"GET /api/v1/user/\xff\xfe/jobs HTTP/1.1\r\nHost: paiq\r\n\r\n", 400, "InvalidParametersError",
                 "URL", ("\ufffd",), id="raw-bytes-in-path"),
    pytest.param(request_bytes("GET", "/api/v1/jobs", b"X-Null: n\x00ll"), 400, "InvalidParametersError",
                 "not valid HTTP", ("n\x00ll", "\\u0000"), id="nul-in-header"),
    pytest.param(request_bytes("GET", "/api/v1/jobs", b"Host: 0th3r"), 400, "InvalidParametersError",
                 "not valid HTTP", ("0th3r",), id="two-host-headers"),
    pytest.param(request_bytes("POST", "/api/v1/token", b"Content-Length: 12abc"), 400, "InvalidParametersError",
                 "not valid HTTP", ("12abc",), id="bad-content-length"),
    pytest.param(request_bytes("POST", "/api/v1/token", b"Transfer-Encoding: chunked", b"Content-Length: 5")
                 + b"0\r\n\r\n", 400, "InvalidParametersError", "not valid HTTP", (), id="length-and-chunked"),
    pytest.param(request_bytes("POST", "/api/v1/token", b"Content-Type: application/json",
                               b"Transfer-Encoding: chunked") + b"zz\r\nchunk3d\r\n0\r\n\r\n", 400,
                 "InvalidParametersError", "", ("chunk3d", "zz"), id="bad-chunk-size"),
    pytest.param(request_bytes("GET", "/api/v1/whoami", b"Authorization: Bearer \xff\xfe\x80t0ken"), 401,
                 "UnauthorizedUserError", "ASCII", ("t0ken", "\ufffd", "\\udc"), id="authorization-not-utf8"),
    pytest.param(request_bytes("POST", "/api/v1/token", b"Content-Type: application/json",
                               b"Content-Encoding: gzip", body=b"n0t gzip at all"), 400, "InvalidParametersError",
                 "Content-Encoding", ("n0t gzip",), id="content-encoding-garbage"),
    pytest.param(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, "InvalidParametersError", "HTTP/1.1", (),
                 id="http2-preface"),
])
async def test_bytes_that_are_not_http_are_json_refusals(platform: Platform, data: bytes, status: int, code: str,
                                                         says: str, not_echoed: tuple[str, ...]) -> None:
    refused(await send_bytes(platform, data), status, code, says=says, not_echoed=not_echoed)


# --- path and query parameters ---------------------------------------------------------------------------

PATH_CASES = [
    pytest.param("/api/v1/user/%ED%BF%BF/jobs", 400, "InvalidParametersError", "user name", ("\ufffd", "\udfff"),
                 id="lone-surrogate-user"),
    pytest.param("/api/v1/user/" + "u" * 300 + "/jobs", 400, "InvalidParametersError", "300 characters",
                 ("uuuuuuuu",), id="long-user"),
    pytest.param("/api/v1/user/a%00b%0Ac/jobs", 400, "InvalidParametersError", "control characters",
                 ("\x00", "\\u0000", "a\nb"), id="control-characters-in-user"),
    pytest.param("/api/v1/user/admin/jobs/%00%0A%1B", 404, "NoJobError", "control characters",
                 ("\x00", "\\u0000", "\x1b"), id="control-characters-in-job"),
    pytest.param("/api/v1/user/admin/jobs/" + "j" * 5000, 404, "NoJobError", "5000 characters", ("jjjjjjjj",),
                 id="long-job"),
    pytest.param("/api/v1/user/admin/jobs/%ED%BF%BF/ssh", 404, "NoJobError", "", ("\ufffd", "\udfff"),
                 id="lone-surrogate-job"),
    pytest.param("/api/v1/user/admin/jobs/x/tasks/%ED%BF%BF/%ED%BF%BF/log", 404, "NoJobError", "", ("\ufffd",),
                 id="lone-surrogate-task"),
    pytest.param("/api/v1/virtual-clusters/%00%FF", 404, "NoVirtualClusterError", "", ("\x00", "\\u0000"),
                 id="odd-virtual-cluster"),
    pytest.param("/api/v1/virtual-clusters/" + "v" * 3000, 404, "NoVirtualClusterError", "3000 characters",
                 ("vvvvvvvv",), id="long-virtual-cluster"),
    pytest.param("/portal/%00%0A..%2F..%2Fetc%2Fpasswd", 404, "NoApiError", "", ("\x00", "passwd"),
                 id="odd-portal-file"),
    pytest.param("/api/v1/" + "n%00" * 100, 404, "NoApiError", "characters", ("\x00", "\\u0000"),
                 id="no-such-api-odd-path"),
    pytest.param("/api/v1/jobs?username=%ED%BF%BF", 400, "InvalidParametersError", "user name", ("\ufffd",),
                 id="lone-surrogate-query"),
    pytest.param("/api/v1/jobs?limit=abc", 400, "InvalidParametersError", "limit", (), id="limit-not-a-number"),
    pytest.param("/api/v1/jobs?limit=" + "9" * 5000, 400, "InvalidParametersError", "limit", ("99999999",),
                 id="limit-5000-digits"),
    pytest.param("/api/v1/jobs?offset=-1", 400, "InvalidParametersError", "offset", (), id="offset-negative"),
    pytest.param("/api/v1/jobs?limit=0", 400, "InvalidParametersError", "limit", (), id="limit-zero"),
    pytest.param("/api/v1/jobs?limit=1e3", 400, "InvalidParametersError", "limit", (), id="limit-float"),
    pytest.param("/api/v1/jobs?cursor=%ED%BF%BF", 400, "InvalidParametersError", "cursor", ("\ufffd",),
                 id="cursor-lone-surrogate"),
]


@pytest.mark.parametrize(("path", "status", "code", "says", "not_echoed"), PATH_CASES)
async def test_odd_path_and_query_parameters_are_named_4xx(platform: Platform, admin_token: str, path: str,
                                                           status: int, code: str, says: str,
                                                           not_echoed: tuple[str, ...]) -> None:
    answer = await raw(platform, "GET", path, headers={"Authorization": f"Bearer {admin_token}"})
    refused(answer, status, code, says=says, not_echoed=not_echoed)


@pytest.mark.parametrize(("query", "says", "not_echoed"), [
    ("tail=abc", "tail", ()),
    ("tail=-1", "tail", ()),
    ("tail=" + "8" * 5000, "tail", ("88888888",)),
    ("tail=1e3", "tail", ()),
    ("tail=%D9%A3", "tail", ("\u0663",)),  # an Arabic-Indic 3: int() would take it
    ("attempt=" + "7" * 30, "attempt", ("77777777",)),
    ("attempt=%ED%BF%BF", "attempt", ("\ufffd",)),
    ("stream=%00", "stream", ("\x00", "\\u0000")),
])
async def test_bad_log_query_numbers_are_400(platform: Platform, admin_token: str, query: str, says: str,
                                             not_echoed: tuple[str, ...]) -> None:
    name = unique("logq")
    never_fits = [{"name": "main", "taskNumber": 1, "cpuNumber": 1024, "memoryMB": 128, "command": "true"}]
    auth = {"Authorization": f"Bearer {admin_token}"}
    status, body, _ = await raw(platform, "POST", f"/api/v1/user/{ADMIN_USER}/jobs", headers=auth,
                                json=job_config(name, command="true", roles=never_fits))
    assert status == 202, body
    try:
        log = f"/api/v1/user/{ADMIN_USER}/jobs/{name}/tasks/main/0/log"
        refused(await raw(platform, "GET", f"{log}?{query}", headers=auth), 400, "InvalidParametersError",
                says=says, not_echoed=not_echoed)
        huge_index = log.replace("/main/0/", "/main/" + "8" * 5000 + "/")
        refused(await raw(platform, "GET", huge_index, headers=auth), 404, "NoJobError", not_echoed=("88888888",))
    finally:
        await raw(platform, "PUT", f"/api/v1/user/{ADMIN_USER}/jobs/{name}/executionType", headers=auth,
                  json={"value": "STOP"})


# --- bodies that never arrive, user names a URL cannot reach, warnings that must stay one header ----------

BODY_TIMEOUT_SECONDS = 3  # PAIQ_BODY_TIMEOUT_SECONDS of the test platforms (tests/infra.py)


async def answer_in_time(platform: Platform, data: bytes, limit: float) -> tuple[Answer, float]:
    """Send ``data`` on a connection left open (a client that promised more bytes than it sends); the
    answer, read as soon as it is complete, and how long it took."""
    host, port = platform.api.rsplit("//", 1)[1].split(":")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), limit)
        status_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines)
        payload = await asyncio.wait_for(reader.readexactly(int(headers["Content-Length"])), limit)
    finally:
        writer.close()
    return (int(status_line.split(" ")[1]), json.loads(payload), headers), loop.time() - t0


# Each route that reads a body, with each content type it takes (the job routes take JSON only).
STALLED_BODIES = [("POST /api/v1/token", "application/json"), ("POST /api/v1/token", FORM),
                  ("POST /api/v1/user/{user}/jobs", "application/json"),
                  ("PUT /api/v1/user/{user}/jobs/j/executionType", "application/json"),
                  ("PUT /api/v1/user", "application/json"), ("PUT /api/v1/user", FORM)]


async def test_a_body_shorter_than_its_content_length_is_408_in_time(platform: Platform, admin_token: str) -> None:
    """Every route and content type at once, each on its own connection (each waits out the same timeout)."""
    async def stalled(route: str, content_type: str) -> tuple[Answer, float]:
        method, path = route.format(user=ADMIN_USER).split(" ")
        data = request_bytes(method, path, f"Authorization: Bearer {admin_token}".encode(),
                             f"Content-Type: {content_type}".encode(), b"Content-Length: 1000") + b'{"username": '
        return await answer_in_time(platform, data, BODY_TIMEOUT_SECONDS + 15)

    answers = await asyncio.gather(*(stalled(route, content_type) for route, content_type in STALLED_BODIES))
    for (route, content_type), (answer, took) in zip(STALLED_BODIES, answers, strict=True):
        try:
            refused(answer, 408, "RequestTimeoutError", says=f"within {BODY_TIMEOUT_SECONDS} s")
            assert BODY_TIMEOUT_SECONDS - 0.5 <= took <= BODY_TIMEOUT_SECONDS + 10, took
        except AssertionError as e:
            raise AssertionError(f"{route} with {content_type}: {e}") from e


@pytest.mark.parametrize(("body", "says"), [
    pytest.param(b'{"value": "\xff"}', "not valid UTF-8", id="invalid-utf8"),
    pytest.param(b'{"value": "\\udfff"}', "surrogate", id="lone-surrogate"),
    pytest.param(b"[" * 100_000, "nested too deeply", id="deep"),
    pytest.param(b'{"value": NaN}', "NaN", id="nan"),
    pytest.param(b"", "empty", id="empty"),
    pytest.param(b'["STOP"]', 'must be "STOP"', id="not-an-object"),
    pytest.param(b'{"value": "' + b"S" * 5000 + b'"}', 'must be "STOP"', id="long-value"),
])
async def test_a_bad_execution_type_body_is_a_400(platform: Platform, admin_token: str, body: bytes,
                                                  says: str) -> None:
    answer = await raw(platform, "PUT", f"/api/v1/user/{ADMIN_USER}/jobs/no-such-job/executionType", data=body,
                       headers={"Authorization": f"Bearer {admin_token}", "Content-Type": "application/json"})
    refused(answer, 400, "InvalidParametersError", says=says, not_echoed=("S" * 100,))


@pytest.mark.parametrize("name", [".", "..", "..."])
async def test_user_names_of_dots_only_are_refused(platform: Platform, admin_token: str, name: str) -> None:
    answer = await raw(platform, "PUT", "/api/v1/user", headers={"Authorization": f"Bearer {admin_token}"},
                       json={"username": name, "password": "dots-pass", "admin": False})
    refused(answer, 400, "InvalidParametersError", says="not dots only")


async def test_odd_unknown_keys_are_warned_in_one_ascii_header_and_the_job_kept(platform: Platform,
                                                                                 admin_token: str) -> None:
    name = unique("oddkeys")
    odd = {"evil\r\nSet-Cookie: paiq=1": 1, "ключ": 2, "k" * 1000: 3, "sep\u2028arator": 4}
    never_fits = [{"name": "main", "taskNumber": 1, "cpuNumber": 1024, "memoryMB": 128, "command": "true"}]
    auth = {"Authorization": f"Bearer {admin_token}"}
    status, body, headers = await raw(platform, "POST", f"/api/v1/user/{ADMIN_USER}/jobs", headers=auth,
                                      json={**job_config(name, command="true", roles=never_fits), **odd})
    try:
        assert status == 202, body
        header = headers["X-Warning"]
        assert header.isascii() and header.isprintable() and "Set-Cookie" not in headers, header
        assert "\\u043a" in header and "k" * 64 + "..." in header and "k" * 65 not in header, header
        assert len(body["warnings"]) == 4 and any("ключ" in w for w in body["warnings"]), body
        status, config, _ = await raw(platform, "GET", f"/api/v1/user/{ADMIN_USER}/jobs/{name}/config")
        assert status == 200 and {k: config[k] for k in odd} == odd, "the stored config keeps every key"
    finally:
        await raw(platform, "PUT", f"/api/v1/user/{ADMIN_USER}/jobs/{name}/executionType", headers=auth,
                  json={"value": "STOP"})


# --- and then the platform still answers ------------------------------------------------------------------

async def test_after_all_that_the_platform_still_answers(platform: Platform) -> None:
    for _ in range(3):  # a burst of the worst of the above, on their own connections
        await asyncio.gather(
            raw(platform, "GET", "/api/v1/whoami", headers={"Authorization": BIG_TOKEN}),
            send_bytes(platform, b"G3T@ / HTTP/1.1\r\n\r\n"),
            raw(platform, "POST", "/api/v1/token", data=b"[" * 100_000, headers={"Content-Type": "application/json"}),
            raw(platform, "POST", "/api/v1/token", data=b"G4RBAGE" * 1000,
                headers={"Content-Type": "multipart/form-data; boundary=xyz"}),
        )
    status, body, _ = await raw(platform, "GET", "/healthz")
    assert (status, body["status"]) == (200, "ok"), body
    token = await token_of(platform, ADMIN_USER, ADMIN_PASSWORD)
    status, body, _ = await raw(platform, "GET", "/api/v1/whoami", headers={"Authorization": f"Bearer {token}"})
    assert (status, body["user"]) == (200, ADMIN_USER)
    status, jobs, _ = await raw(platform, "GET", "/api/v1/jobs?limit=5")
    assert status == 200 and isinstance(jobs, list)
    log = _submit_log(platform)
    assert "request failed" not in log, "a request above failed with a 500"
    assert "Error handling request" not in log, "aiohttp answered a request by itself"


def _submit_log(platform: Platform) -> str:
    """The submit service's own log (paiq up's, where all services share one)."""
    name = "paiq-up.log" if platform.shape == "all-in-one" else "submit.log"
    return (platform.workdir / name).read_text(errors="replace")
