"""The REST API's route table: every route of every module, in the order aiohttp's router tries them.

:func:`services.submit.app.create_app` registers exactly these, and :func:`services.submit.openapi.document`
describes exactly these, so what is served and what is documented cannot drift apart. The document itself
is served from the app (:data:`DOCUMENT`), built once when the app is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from services.submit.contract.route import Reply, Route, text
from services.submit.routes import (
    access,
    clusters,
    feed,
    health,
    jobs,
    listing,
    logs,
    notify,
    pages,
    profiles,
    ssh,
    usage,
)
from services.submit.routes.v2 import access as v2access
from services.submit.routes.v2 import clusters as v2clusters
from services.submit.routes.v2 import groupfields as v2groupfields
from services.submit.routes.v2 import joblist as v2joblist
from services.submit.routes.v2 import jobreads as v2jobreads
from services.submit.routes.v2 import jobs as v2jobs
from services.submit.routes.v2 import profile as v2profile
from services.submit.routes.v2 import users as v2users

DOCUMENT = web.AppKey("openapi_document", dict[str, Any])


@dataclass(frozen=True)
class ApiPage:
    """``GET /api/docs``: the reference rendered from :data:`DOCUMENT` when the app is made
    (:func:`services.submit.apidoc.html`), and the CSP source of its one inline style."""

    body: str
    style_source: str


API_PAGE = web.AppKey("api_reference_page", ApiPage)


async def get_openapi(request: web.Request) -> web.Response:
    return web.json_response(request.app[DOCUMENT])


async def get_api_docs(request: web.Request) -> web.Response:
    page = request.app[API_PAGE]
    return web.Response(text=page.body, content_type="text/html", headers={
        # nothing loads, nothing runs: its one inline style by its hash, no script, no framing
        "Content-Security-Policy": f"default-src 'none'; style-src {page.style_source}; base-uri 'none'; "
                                   "form-action 'none'; frame-ancestors 'none'",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    })


ROUTES: tuple[Route, ...] = (
    *health.ROUTES,
    *access.ROUTES,
    *listing.ROUTES,
    *jobs.ROUTES,
    *v2joblist.ROUTES,
    *v2jobs.ROUTES,
    *v2jobreads.ROUTES,
    *ssh.ROUTES,
    *clusters.ROUTES,
    *v2access.ROUTES,
    *v2profile.ROUTES,
    *v2users.ROUTES,
    *v2groupfields.ROUTES,
    *v2groupfields.singular((*v2profile.ROUTES, *v2users.ROUTES, *v2groupfields.ROUTES)),
    *v2clusters.ROUTES,
    Route("GET", "/api/v1/openapi.json", get_openapi, "this document",
          {200: Reply("", content={"application/json": {"type": "object"}})}),
    Route("GET", "/api/docs", get_api_docs, "this document as a web page: every route and schema, linked",
          {200: text("", "text/html")}),
    *logs.ROUTES,
    *profiles.ROUTES,
    *usage.ROUTES,
    *notify.ROUTES,
    *feed.ROUTES,
    *pages.ROUTES,
)
