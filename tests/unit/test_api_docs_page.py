"""``GET /api/docs``: the REST API's reference as a web page, served by the app from the document it serves at
``/api/v1/openapi.json``: every route and every schema with a section of its own, every link inside the page
landing on one, nothing that loads or runs (no script, its inline style allowed by its hash alone), and
text from the document shown as text."""

from __future__ import annotations

import base64
import copy
import hashlib
import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer

from services.submit.apidoc import Operation, html
from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.openapi import document
from services.submit.routes.table import ROUTES
from shared.bus.memory import MemoryBus
from shared.settings.model import Settings

pytestmark = pytest.mark.unit


class Page(HTMLParser):
    """The ids, the links, the tags and the inline style of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.tags: set[str] = set()
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._in_style = tag == "style"
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name == "href" and value:
                self.links.append(value)

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, dict[str, str]]]:
    deps = SubmitDeps(settings=Settings.from_env({}), store=cast(Any, None), bus=MemoryBus(), users=cast(Any, None))
    async with TestClient(TestServer(create_app(deps))) as client:
        resp = await client.get("/api/docs")
        assert resp.status == 200 and resp.content_type == "text/html"
        yield await resp.text(), dict(resp.headers)
    deps.cpu.shutdown()


def parsed(body: str) -> Page:
    page = Page()
    page.feed(body)
    return page


async def test_every_route_and_schema_has_its_section_and_every_link_lands(
        served: tuple[str, dict[str, str]]) -> None:
    body, _ = served
    page = parsed(body)
    doc = document()
    anchors = [Operation(route.method.lower(), route.path, "", False, (), None, False, ()).anchor for route in ROUTES]
    assert len(set(anchors)) == len(ROUTES), "two routes share an anchor"
    for route, anchor in zip(ROUTES, anchors, strict=True):
        assert anchor in page.ids, f"{route.method} {route.path} has no section"
    assert {f"schema-{name}" for name in doc["components"]["schemas"]} <= page.ids
    inside = [link[1:] for link in page.links if link.startswith("#")]
    assert len(inside) > len(ROUTES) and set(inside) <= page.ids, set(inside) - page.ids
    assert {link for link in page.links if not link.startswith("#")} == {"/api/v1/openapi.json", "/"}


async def test_nothing_on_the_page_loads_or_runs_but_its_own_style(served: tuple[str, dict[str, str]]) -> None:
    body, headers = served
    page = parsed(body)
    assert not page.tags & {"script", "iframe", "img", "link", "form", "object", "embed"}
    csp = headers["Content-Security-Policy"]
    style_hash = "'sha256-" + base64.b64encode(hashlib.sha256(page.style.encode()).digest()).decode() + "'"
    assert re.fullmatch(rf"default-src 'none'; style-src {re.escape(style_hash)}; base-uri 'none'; "
                        "form-action 'none'; frame-ancestors 'none'", csp), csp
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_text_from_the_document_is_shown_as_text() -> None:
    doc = copy.deepcopy(document())  # the app's own, made once
    path = next(iter(doc["paths"]))
    method = next(m for m in doc["paths"][path] if m in ("get", "post"))
    doc["paths"][path][method]["summary"] = '<script>alert("summary")</script>'
    doc["info"]["description"] = "<img src=x onerror=alert(1)>"
    name = next(iter(doc["components"]["schemas"]))
    doc["components"]["schemas"][name]["description"] = "</style><script>alert(2)</script>"
    page = parsed(rendered := html(doc))
    assert "script" not in page.tags and "img" not in page.tags
    assert "&lt;script&gt;alert(&quot;summary&quot;)&lt;/script&gt;" in rendered
