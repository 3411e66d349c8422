"""The web portal: one page of plain HTML, CSS and JavaScript modules (no build step, nothing fetched from
elsewhere), served at ``/`` with its files under ``/portal/``, and ``GET /api/v1/whoami``, which tells the
page whose token it holds.

The page is a client of the public API like any other: it logs in with ``POST /api/v1/token``, reads
jobs and virtual clusters, follows ``/api/v1/events`` and submits and stops jobs with its bearer token.
Its files are read once, when the app is made, from ``services/submit/portal/`` (package
data), and served from memory: only those names exist, so no path from a request reaches the file system.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import web

from services.submit.contract.answers import Whoami, answer
from services.submit.contract.route import Param, Reply, Route, text
from services.submit.errors import ApiError, shown
from services.submit.routes.access import principal_of

log = structlog.get_logger("paiq.submit")

PORTAL_DIR = Path(__file__).parents[1] / "portal"  # services/submit/portal
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
# Only the portal's own files may load or be fetched; no inline script, no other origin, no framing (nosniff, as
# on every answer: services.submit.contract.headers).
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets(directory: Path) -> dict[str, Asset]:
    """The portal's files by name (flat: the directory has no subdirectories)."""
    assets: dict[str, Asset] = {}
    if not directory.is_dir():
        log.warning("the web portal's files are missing; / answers 404", path=str(directory))
        return assets
    for path in sorted(directory.iterdir()):
        content_type = CONTENT_TYPES.get(path.suffix)
        if content_type is None or not path.is_file():
            continue
        body = path.read_bytes()
        assets[path.name] = Asset(body, content_type, f'"{hashlib.sha256(body).hexdigest()[:16]}"')
    return assets


ASSETS = web.AppKey("portal_assets", dict[str, Asset])


def _serve(request: web.Request, name: str) -> web.Response:
    asset = request.app[ASSETS].get(name)
    if asset is None:
        raise ApiError("NoApiError", f"the web portal has no file {shown(name)}")
    headers = {**SECURITY_HEADERS, "ETag": asset.etag}
    if request.headers.get("If-None-Match") == asset.etag:
        return web.Response(status=304, headers=headers)
    return web.Response(body=asset.body, content_type=asset.content_type, charset="utf-8", headers=headers)


async def get_index(request: web.Request) -> web.Response:
    return _serve(request, "index.html")


async def get_asset(request: web.Request) -> web.Response:
    return _serve(request, request.match_info["file"])


async def get_whoami(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    return answer(Whoami(user=principal.user, admin=principal.admin, groups=principal.groups))


def add_portal(app: web.Application) -> None:
    """The portal's files, read once."""
    app[ASSETS] = load_assets(PORTAL_DIR)


_UNCHANGED = Reply("unchanged since the ETag sent in If-None-Match")

ROUTES = (
    Route("GET", "/", get_index, "the web portal (a single page; see docs: Web portal)",
          {200: text("the portal's page", "text/html"), 304: _UNCHANGED}),
    Route("GET", "/portal/{file}", get_asset, "a file of the web portal (JavaScript module, style sheet or icon)",
          {200: text("the file", *sorted(set(CONTENT_TYPES.values()) - {"text/html"})), 304: _UNCHANGED}, (404,),
          params=(Param("file", "path"),)),
    Route("GET", "/api/v1/whoami", get_whoami, "whose token this is: the user, whether an administrator, and the "
          "user's groups", {200: Reply("the token's user", Whoami)}, (401,), auth="token"),
)
