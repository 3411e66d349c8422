"""A webhook body checked as a CloudEvent twice: by the official Python SDK (``cloudevents``, its current
``cloudevents.core`` API, as a receiver would parse it) and by the CloudEvents 1.0 spec's rules written out
here (so a rule the SDK happens not to check is still checked):

- ``specversion`` is ``1.0``; ``id``, ``source`` and ``type`` are present, non-empty strings;
- an optional attribute (``datacontenttype``, ``dataschema``, ``subject``, ``time``), when present, is a
  non-empty string; ``time`` is an RFC 3339 timestamp;
- an attribute's name is lower-case letters and digits (at most 20 advised); an extension's value is a
  string, a number or a boolean, never null.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from cloudevents.core.bindings.http import HTTPMessage, from_http_event
from cloudevents.core.v1.event import CloudEvent

REQUIRED = ("id", "source", "type")
OPTIONAL = ("datacontenttype", "dataschema", "subject", "time")
_NAME = re.compile(r"[a-z0-9]{1,20}")
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def spec_problems(event: dict[str, Any]) -> list[str]:
    """What in a structured-mode CloudEvent breaks the 1.0 spec (none: it is valid)."""
    problems = [] if event.get("specversion") == "1.0" else [f"specversion: {event.get('specversion')!r}"]
    problems += [f"{name}: must be a non-empty string" for name in REQUIRED
                 if not isinstance(event.get(name), str) or not event[name]]
    problems += [f"{name}: must be a non-empty string when present" for name in OPTIONAL
                 if name in event and (not isinstance(event[name], str) or not event[name])]
    if isinstance(event.get("time"), str) and event["time"] and not _RFC3339.fullmatch(event["time"]):
        problems.append(f"time: {event['time']!r} is not RFC 3339")
    for name, value in event.items():
        if not _NAME.fullmatch(name):
            problems.append(f"{name}: an attribute's name is lower-case letters and digits")
        elif name not in {"specversion", "data", "data_base64", *REQUIRED, *OPTIONAL} and (
                value is None or not isinstance(value, str | int | float | bool)):
            problems.append(f"{name}: an extension's value must be a string, number or boolean")
    return problems


def parsed(body: bytes, content_type: str = "application/cloudevents+json") -> CloudEvent:
    """The body as the SDK reads a structured-mode HTTP request (raises its validation error if invalid)."""
    event = from_http_event(HTTPMessage(headers={"content-type": content_type}, body=body))
    assert isinstance(event, CloudEvent), type(event)
    return event


def checked(body: bytes, content_type: str = "application/cloudevents+json") -> CloudEvent:
    """The body parsed by the SDK, after the spec's rules found nothing wrong with it."""
    problems = spec_problems(json.loads(body))
    assert not problems, problems
    event = parsed(body, content_type)
    time = event.get_time()
    assert time is None or isinstance(time, datetime)
    return event
