"""Request bodies as the API reads them: a JSON object, or an HTML form (urlencoded or multipart).

Everything is decoded strictly (UTF-8 only, no lone surrogates, no NaN) and bounded: the body by the
app's ``client_max_size`` and in time by ``PAIQ_BODY_TIMEOUT_SECONDS`` (a client that announces more
than it sends gets a 408, it does not hold the request open), a form by :data:`MAX_FORM_FIELDS` fields
of at most :data:`MAX_FORM_VALUE_BYTES` each, no files. Each refusal is a 400 ``InvalidParametersError``
(413 ``PayloadTooLargeError`` for size) saying what is wrong, never what the parser said nor the bytes
it choked on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from shared.admission.validation import no_json_constant

FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})
# The routes that take forms read at most six fields, each a name, a password or a number.
MAX_FORM_FIELDS = 16
MAX_FORM_VALUE_BYTES = 4096
T = TypeVar("T")
_UTF8 = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})


def _invalid(message: str) -> ApiError:
    return ApiError("InvalidParametersError", message)


def check_charset(request: web.Request) -> None:
    charset = request.charset
    if charset is not None and charset.lower() not in _UTF8:
        raise _invalid(f"charset {shown(charset)} is not supported; send the body as UTF-8")


async def in_time(request: web.Request, reading: Awaitable[T]) -> T:
    """``reading`` (of the request's body), or a 408 once the body takes longer than the setting allows."""
    seconds = request.app[DEPS].settings.body_timeout_seconds
    try:
        async with asyncio.timeout(seconds):
            return await reading
    except TimeoutError as e:
        raise ApiError("RequestTimeoutError", f"the request body did not arrive within {seconds} s (is "
                                              "Content-Length larger than the body sent?)") from e


async def read_bytes(request: web.Request) -> bytes:
    """The whole body, within the time the settings allow."""
    return await in_time(request, request.read())


async def read_object(request: web.Request) -> dict[str, Any]:
    """The body as a dict: fields of a form (each a string) or a JSON object (OpenPAI's clients send both)."""
    if request.content_type in FORM_TYPES:
        return await read_form(request)
    data = await read_json(request)
    if not isinstance(data, dict):
        raise _invalid("the body must be a JSON object or a form")
    return data


async def read_json(request: web.Request) -> Any:
    """The body as JSON (any value; the caller checks its shape)."""
    check_charset(request)
    raw = await read_bytes(request)
    if not raw.strip():
        raise _invalid("the body is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _invalid(f"the body is not valid UTF-8 (at byte {e.start})") from e
    try:
        data = json.loads(text, parse_constant=no_json_constant)
    except json.JSONDecodeError as e:
        raise _invalid(f"the body is not valid JSON (line {e.lineno}, column {e.colno})") from e
    except RecursionError as e:
        raise _invalid("the body's JSON is nested too deeply") from e
    except ValueError as e:  # NaN or Infinity, or an integer of thousands of digits
        raise _invalid("the body's JSON holds a number JSON does not allow (NaN, Infinity or thousands of "
                       "digits)") from e
    if _has_lone_surrogate(data):
        raise _invalid("the body's JSON holds an unpaired UTF-16 surrogate escape (such as \\udfff); "
                       "strings must be valid Unicode")
    return data


def _has_lone_surrogate(value: object) -> bool:
    """Whether a string anywhere in ``value`` (keys included) cannot be encoded as UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


async def read_form(request: web.Request) -> dict[str, str]:
    """A form's fields by name: at most :data:`MAX_FORM_FIELDS`, each once, as text."""
    check_charset(request)
    if request.content_type == "multipart/form-data":
        pairs = await in_time(request, _multipart_pairs(request))
    else:
        pairs = _urlencoded_pairs(await read_bytes(request))
    fields: dict[str, str] = {}
    for name, value in pairs:
        if _has_lone_surrogate(name):  # a multipart part's name is not decoded strictly
            raise _invalid("a form field's name is not valid UTF-8")
        if name in fields:
            raise _invalid(f"form field {shown(name)} is given more than once")
        if len(value.encode()) > MAX_FORM_VALUE_BYTES:
            raise _invalid(f"form field {shown(name)} must be at most {MAX_FORM_VALUE_BYTES} bytes")
        fields[name] = value
    return fields


def _urlencoded_pairs(raw: bytes) -> list[tuple[str, str]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _invalid(f"the form is not valid UTF-8 (at byte {e.start})") from e
    try:
        return parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS, errors="strict")
    except UnicodeDecodeError as e:
        raise _invalid("the form's %-escapes do not decode as UTF-8") from e
    except ValueError as e:  # parse_qsl's own refusal of more fields than max_num_fields
        raise _invalid(f"a form may have at most {MAX_FORM_FIELDS} fields") from e


async def _multipart_pairs(request: web.Request) -> list[tuple[str, str]]:
    """The text fields of a multipart/form-data body, read part by part and bounded as they come.

    aiohttp's reader reads the preamble before the first boundary line by line without a bound, so
    the body must say its length (browsers and HTTP libraries always do for forms).
    """
    if request.content_length is None:
        raise _invalid("a multipart/form-data body needs a Content-Length header")
    if request.content_length > request.client_max_size:
        raise ApiError("PayloadTooLargeError", f"the request body must be at most {request.client_max_size} bytes")
    try:
        reader = await request.multipart()
    except ValueError as e:
        raise _invalid("multipart/form-data needs a boundary parameter of 1-70 characters, e.g. "
                       "'multipart/form-data; boundary=xyz'") from e
    pairs: list[tuple[str, str]] = []
    try:
        while (part := await reader.next()) is not None:
            if len(pairs) == MAX_FORM_FIELDS:
                raise _invalid(f"a form may have at most {MAX_FORM_FIELDS} fields")
            pairs.append(await _text_part(part))
    except (ValueError, RuntimeError, HttpProcessingError) as e:
        # What aiohttp's reader raises on a body that does not follow its boundary (RFC 7578), or on part
        # headers over its limits; its messages quote the body, so they are not passed on.
        raise _invalid("the multipart/form-data body does not follow its boundary: each part starts with a "
                       "line '--' + boundary, then its headers and a blank line; the body ends with '--' + "
                       "boundary + '--'") from e
    return pairs


async def _text_part(part: object) -> tuple[str, str]:
    if not isinstance(part, BodyPartReader):
        raise _invalid("a form's part may not itself be multipart")
    name = part.name
    if not name:
        raise _invalid("each part of a multipart/form-data body needs a name "
                       "(Content-Disposition: form-data; name=...)")
    if part.filename is not None:
        raise _invalid(f"form field {shown(name)} is a file; this API takes text fields only")
    for header in ("Content-Encoding", "Content-Transfer-Encoding"):
        if part.headers.get(header, "identity").lower() not in {"identity", "binary", "8bit", "7bit"}:
            raise _invalid(f"form field {shown(name)} has a {header}; send it as plain UTF-8 text")
    value = bytearray()
    while chunk := await part.read_chunk():
        value += chunk
        if len(value) > MAX_FORM_VALUE_BYTES:
            raise _invalid(f"form field {shown(name)} must be at most {MAX_FORM_VALUE_BYTES} bytes")
    try:
        return name, value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _invalid(f"form field {shown(name)} is not valid UTF-8") from e
