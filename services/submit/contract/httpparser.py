"""What aiohttp answers by itself, said as OpenPAI's ``{code, message}``.

Some requests never reach the app's middleware: those aiohttp's HTTP parser refuses (a header or the
request line over its limit, too many headers, bytes that are not HTTP) and those aiohttp turns away
before the middleware runs (an ``Expect`` other than ``100-continue``). aiohttp answers them itself in
``text/plain``, quoting up to 100 bytes of the offending line (a 1 MB ``Authorization`` header came back
as its first 100 bytes) and logging it with a traceback.

aiohttp has no hook for those answers (aio-libs/aiohttp#3287, #9882): its ``web.Server`` always makes a
``web_protocol.RequestHandler`` and that handler builds them in ``handle_error`` and sends them through
``finish_response``. So this module, and only this one, overrides those two methods in a subclass of
the handler, makes ``web.Server`` build it (as ``Server.__call__`` does) and ``web.AppRunner`` use that
server. ``tests/unit/test_submit_protocol.py`` fails if aiohttp changes any of what this relies on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    BadStatusLine,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    PayloadEncodingError,
)
from aiohttp.web_protocol import RequestHandler

from services.submit.contract.headers import stamp
from services.submit.errors import ApiError, for_status

log = structlog.get_logger("paiq.submit.protocol")

# aiohttp's own defaults, stated here so that the answers can say them.
MAX_LINE_BYTES = 8190  # the request line: method, URL, version
MAX_FIELD_BYTES = 8190  # one header, name and value
MAX_HEADERS = 128
PARSER_LIMITS: dict[str, int] = {"max_line_size": MAX_LINE_BYTES, "max_field_size": MAX_FIELD_BYTES,
                                 "max_headers": MAX_HEADERS}
# The parser's message for one header too many (the only BadHttpMessage that is about size).
TOO_MANY_HEADERS = "Too many headers received"


@dataclass(frozen=True)
class ParserRefusal:
    kind: type[HttpProcessingError]
    status: int
    message: str


# First match wins: subclasses before their bases. 431 for sizes, as Node.js (OpenPAI's REST server) did.
PARSER_REFUSALS = (
    ParserRefusal(LineTooLong, 431, f"the request line (method, URL, version) and each header must be at most "
                                    f"{MAX_LINE_BYTES} bytes"),
    ParserRefusal(BadHttpMethod, 400, "the request does not start with an HTTP method (HTTPS or HTTP/2 sent to "
                                      "this HTTP/1.1 port?)"),
    ParserRefusal(BadStatusLine, 400, "the request line must be 'METHOD /path HTTP/1.1'"),
    ParserRefusal(InvalidURLError, 400, "the URL holds characters a URL may not hold unescaped (use %XX)"),
    ParserRefusal(InvalidHeader, 400, "a header holds a character HTTP does not allow in headers"),
    ParserRefusal(PayloadEncodingError, 400, "the body's framing is not valid: its Content-Length, chunked "
                                             "Transfer-Encoding or Content-Encoding"),
    ParserRefusal(BadHttpMessage, 400, "the request is not valid HTTP/1.1: its request line, a header or the "
                                       "framing of its body"),
)
# Answers aiohttp makes from HTTPExceptions raised before the middleware runs.
_ABOUT_STATUS = {417: "the Expect header may only be '100-continue'"}


def parser_refusal(exc: BaseException | None) -> ApiError:
    """The answer to a request aiohttp's parser refused with ``exc``: what is wrong, never the bytes."""
    if isinstance(exc, BadHttpMessage) and exc.message == TOO_MANY_HEADERS:
        return for_status(431, f"a request may carry at most {MAX_HEADERS} headers")
    for refusal in PARSER_REFUSALS:
        if isinstance(exc, refusal.kind):
            return for_status(refusal.status, refusal.message)
    return for_status(400, "the request is not valid HTTP/1.1: its request line, a header or the framing of its "
                           "body")


def error_answer(status: int, exc: BaseException | None) -> ApiError:
    """What ``RequestHandler.handle_error`` answers: 400 for what the parser refused, else a failure."""
    if status == 400:
        return parser_refusal(exc)
    if status == 504:
        return for_status(504, "the request took too long to answer")
    return for_status(status, "internal error; the submit service log has the details")


class ApiRequestHandler(RequestHandler):
    """aiohttp's HTTP/1.1 protocol, with its own answers in OpenPAI's shape."""

    __slots__ = ()

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        # ``message`` is the parser's, quoting the request: neither answered nor logged.
        if request.writer.output_size > 0:
            # as aiohttp's own: once an answer has begun, another cannot be sent; the connection is dropped
            raise ConnectionError("the response had begun; an error answer cannot follow it")
        answer = error_answer(status, exc)
        if answer.status >= 500:
            log.error("request failed outside the API's handlers", status=answer.status, exc_info=exc)
        else:
            log.info("request refused by the HTTP parser", status=answer.status, refusal=type(exc).__name__,
                     remote=request.remote)
        response = answer.response()
        stamp(response, secret=False)
        response.force_close()
        return response

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        if isinstance(resp, web.HTTPException) and resp.status >= 400:
            # raised before the middleware ran (which answers every other); its text may quote the request
            about = _ABOUT_STATUS.get(resp.status, f"{resp.status} {resp.reason}")
            resp = for_status(resp.status, about).response()
            stamp(resp, secret=False)
        return await super().finish_response(request, resp, start_time)


class ApiServer(web.Server):
    """``web.Server`` whose connections are :class:`ApiRequestHandler` (its ``__call__``, with that class)."""

    def __call__(self) -> RequestHandler:
        return ApiRequestHandler(self, loop=self._loop, **self._kwargs)


class ApiRunner(web.AppRunner):
    """``web.AppRunner`` serving its app with :class:`ApiServer` and the parser limits stated above."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        super().__init__(app, **{**PARSER_LIMITS, **kwargs})

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # starts and freezes the app, as AppRunner does
        return ApiServer(made.request_handler, request_factory=made.request_factory,
                         handler_cancellation=made.handler_cancellation, loop=asyncio.get_running_loop(),
                         **made._kwargs)
