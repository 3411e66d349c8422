"""services.submit.contract.httpparser: what it relies on in aiohttp is still there, and its answers are OpenPAI's.

If one of these fails after an aiohttp upgrade, aiohttp's own text/plain answers (quoting the request)
are back: see the module's docstring before changing anything.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    BadStatusLine,
    ContentLengthError,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)
from aiohttp.http_parser import HttpRequestParser
from aiohttp.test_utils import make_mocked_request
from aiohttp.web_protocol import RequestHandler

from services.submit.contract.httpparser import (
    MAX_FIELD_BYTES,
    MAX_HEADERS,
    MAX_LINE_BYTES,
    TOO_MANY_HEADERS,
    ApiRequestHandler,
    ApiRunner,
    ApiServer,
    error_answer,
)
from services.submit.errors import STATUS_OF

pytestmark = pytest.mark.unit

SECRET = "Bearer " + "S3CRET" * 20


def test_aiohttp_server_still_makes_its_handler_as_api_server_does() -> None:
    source = inspect.getsource(web.Server.__call__)
    assert "RequestHandler(self, loop=self._loop, **self._kwargs)" in source


@pytest.mark.parametrize(("method", "parameters"), [
    ("handle_error", ["self", "request", "status", "exc", "message"]),
    ("finish_response", ["self", "request", "resp", "start_time"]),
])
def test_the_overridden_methods_keep_their_signatures(method: str, parameters: list[str]) -> None:
    assert list(inspect.signature(getattr(RequestHandler, method)).parameters) == parameters
    assert getattr(ApiRequestHandler, method) is not getattr(RequestHandler, method)


def test_the_protocol_still_sends_parser_errors_and_early_http_exceptions_through_them() -> None:
    assert "self.handle_error(" in inspect.getsource(RequestHandler._make_error_handler)
    early = inspect.getsource(RequestHandler._handle_request)
    assert "except HTTPException" in early and "self.finish_response(" in early


@pytest.mark.parametrize(("head", "status"), [
    (b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(MAX_HEADERS + 1)),
     431),
    (b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: " + SECRET.encode() * 100 + b"\r\n", 431),
    (b"GET /api/v1/jobs?q=" + SECRET.encode().replace(b" ", b"+") * 100 + b" HTTP/1.1\r\nHost: x\r\n", 431),
    (b"S3CRET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n", 400),
    (b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nX-A: S3CRET\x00\r\n", 400),
])
async def test_aiohttp_parser_errors_map_to_the_answers(head: bytes, status: int) -> None:
    """Real bytes through aiohttp's own parser (the C one when built), with the limits the runner sets."""
    parser = HttpRequestParser(mock.Mock(), asyncio.get_running_loop(), 2**16, max_line_size=MAX_LINE_BYTES,
                               max_field_size=MAX_FIELD_BYTES, max_headers=MAX_HEADERS)
    with pytest.raises(HttpProcessingError) as refused:
        parser.feed_data(head + b"\r\n")
    answer = error_answer(400, refused.value)
    assert answer.status == status and "S3CRET" not in answer.message


async def test_the_runner_serves_with_the_api_handler_and_the_stated_limits() -> None:
    runner = ApiRunner(web.Application(), access_log=None)
    await runner.setup()
    try:
        server = runner.server
        assert isinstance(server, ApiServer)
        handler = server()
        assert isinstance(handler, ApiRequestHandler)
        assert (handler.max_line_size, handler.max_field_size, handler.max_headers) == (
            MAX_LINE_BYTES, MAX_FIELD_BYTES, MAX_HEADERS)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("exc", "status", "code"), [
    (LineTooLong(SECRET.encode()[:100] + b"...", MAX_FIELD_BYTES), 431, "RequestHeaderFieldsTooLargeError"),
    (BadHttpMessage(TOO_MANY_HEADERS), 431, "RequestHeaderFieldsTooLargeError"),
    (BadHttpMethod(SECRET), 400, "InvalidParametersError"),
    (BadStatusLine(SECRET), 400, "InvalidParametersError"),
    (InvalidURLError(SECRET), 400, "InvalidParametersError"),
    (InvalidHeader(SECRET.encode()), 400, "InvalidParametersError"),
    (TransferEncodingError(SECRET), 400, "InvalidParametersError"),
    (ContentLengthError(SECRET), 400, "InvalidParametersError"),
    (BadHttpMessage(SECRET), 400, "InvalidParametersError"),
    (HttpProcessingError(code=400, message=SECRET), 400, "InvalidParametersError"),
])
def test_each_parser_refusal_says_what_is_wrong_and_never_quotes_the_request(
        exc: HttpProcessingError, status: int, code: str) -> None:
    answer = error_answer(400, exc)
    assert (answer.status, answer.code) == (status, code)
    assert STATUS_OF[answer.code] == status
    assert "S3CRET" not in answer.message


@pytest.mark.parametrize(("status", "code"), [(500, "UnknownError"), (504, "UnknownError")])
def test_failures_outside_the_handlers_are_unknown_errors(status: int, code: str) -> None:
    answer = error_answer(status, RuntimeError(SECRET))
    assert (answer.status, answer.code) == (status, code) and "S3CRET" not in answer.message


async def test_handle_error_answers_json_and_closes_the_connection() -> None:
    runner = ApiRunner(web.Application(), access_log=None)
    await runner.setup()
    try:
        assert runner.server is not None
        handler = runner.server()
        request = make_mocked_request("GET", "/", writer=mock.Mock(output_size=0))
        response = handler.handle_error(request, 400, LineTooLong(SECRET.encode(), MAX_FIELD_BYTES), SECRET)
        assert isinstance(response, web.Response) and response.status == 431
        assert response.content_type == "application/json" and response.keep_alive is False
        body: Any = json.loads(response.text or "")
        assert set(body) == {"code", "message"} and "S3CRET" not in response.text
    finally:
        await runner.cleanup()
