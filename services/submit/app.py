"""The REST API (OpenPAI v1): wiring (the routes: :mod:`services.submit.routes.table`), the error middleware, and the
admin bootstrap."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog
from aiohttp import web

from services.submit import apidoc
from services.submit.contract.headers import stamp
from services.submit.contract.httpparser import ApiRunner
from services.submit.contract.route import add_routes, route_of
from services.submit.deps import DEPS, SubmitDeps
from services.submit.errors import ApiError, for_status, shown
from services.submit.openapi import document
from services.submit.routes.feed import add_feed
from services.submit.routes.pages import add_portal
from services.submit.routes.passwords import login_guard
from services.submit.routes.table import API_PAGE, DOCUMENT, ROUTES, ApiPage
from services.submit.routes.throttle import heavy_read_budget
from services.submit.users import Users
from shared.admission.validation import MAX_CONFIG_BYTES
from shared.bus.base import Bus
from shared.db.store import Store
from shared.ops.listen import listen
from shared.ops.vitals import Vitals, describe, is_outage
from shared.scheduling.vclusters import load_config
from shared.settings.credentials import credentials_path, write_credentials
from shared.settings.model import Settings
from shared.storageconfig import storage_configs_at

log = structlog.get_logger("paiq.submit")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CLI_TOKEN_SECONDS = 30 * 24 * 3600
SHOWN_PATH_CHARS = 200  # a longer path is described in refusals, not echoed


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as OpenPAI's ``{code, message}``; never a stack trace, never aiohttp's text."""
    try:
        return await handler(request)
    except ApiError as e:
        return e.response()
    except web.HTTPNotFound:
        return ApiError("NoApiError", f"no API at {request.method} {shown(request.path, SHOWN_PATH_CHARS)}").response()
    except web.HTTPMethodNotAllowed as e:
        allowed = ", ".join(sorted(e.allowed_methods))
        return ApiError("MethodNotAllowedError", f"{request.method} is not allowed on "
                        f"{shown(request.path, SHOWN_PATH_CHARS)}; use {allowed}").response({"Allow": allowed})
    except web.HTTPRequestEntityTooLarge:
        return ApiError("PayloadTooLargeError",
                        f"the request body must be at most {request.client_max_size} bytes").response()
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return for_status(e.status, f"{e.status} {e.reason}").response()
    except web.RequestPayloadError:
        # the body arrived broken: bad chunks, or a Content-Encoding its bytes do not decode as
        return ApiError("InvalidParametersError", "the body could not be read: its chunked Transfer-Encoding or "
                                                  "its Content-Encoding is not valid").response()
    except ConnectionResetError:
        # no one will read this answer; it only keeps a client gone mid-body out of the failure log
        log.info("the client closed the connection before its request was answered", method=request.method,
                 path=request.path)
        return ApiError("InvalidParametersError", "the connection closed before the request arrived").response()
    except Exception as e:
        return _failure(request, e)


def _failure(request: web.Request, error: Exception) -> web.Response:
    """A request that failed on paiq's side: 503 for an outage (the store's server selection, 30 s, or the
    broker's confirm, 10 s, waited out), else 500 with the details in the log only."""
    if is_outage(error):
        log.warning("request failed: the database or the broker is unreachable", method=request.method,
                    path=request.path, error=describe(error))
        return ApiError("ServiceUnavailableError", "paiq cannot reach its database or its message broker right "
                        "now; try again shortly").response({"Retry-After": "5"})
    log.error("request failed", method=request.method, path=request.path, exc_info=error)
    return ApiError("UnknownError", "internal error; the submit service log has the details").response()


async def api_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer of the app, as it is prepared (streams, refusals, 404 and 405 too): nosniff, and no-store where
    its route hands out a secret (:mod:`services.submit.contract.headers`)."""
    route = route_of(request)
    stamp(response, secret=route is not None and route.secret)


def create_app(deps: SubmitDeps) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_CONFIG_BYTES * 2)
    app[DEPS] = deps
    app.cleanup_ctx.append(heavy_read_budget)  # anonymous heavy reads (services.submit.routes.throttle)
    app.cleanup_ctx.append(login_guard)  # wrong passwords (services.submit.loginguard)
    add_feed(app)
    add_portal(app)
    add_routes(app, ROUTES)  # every route is one of the table's, which the document describes
    app.on_response_prepare.append(api_headers)
    app[DOCUMENT] = document()
    app[API_PAGE] = ApiPage(apidoc.html(app[DOCUMENT]), apidoc.html_style_hash())
    return app


async def bootstrap_admin(users: Users, settings: Settings) -> None:
    """Make sure an admin exists: the configured one, or (``paiq up``) a local one with a generated password.

    With ``write_credentials`` (``paiq up``), a token for the admin is saved where the CLI finds it
    (``$PAIQ_DATA_DIR/credentials.json``, mode 0600), so the local user needs no ceremony.
    """
    name = settings.admin_user
    if name is None:
        if await users.count() == 0:
            log.warning("no user exists and no admin is configured; set PAIQ_ADMIN_USER and PAIQ_ADMIN_PASSWORD")
        return
    password = settings.admin_password
    generated = password is None
    if password is None:
        password = secrets.token_urlsafe(12)
    if await users.ensure_admin(name, password) and generated:
        print(f"paiq: created administrator {name!r} with password {password!r} (shown once; "
              "change it with PUT /api/v1/user)", flush=True)
    if settings.write_credentials:
        token = await users.issue_token(name, True, CLI_TOKEN_SECONDS)
        path = write_credentials(credentials_path(settings.data_dir), api=settings.api_url, user=name, token=token)
        log.info("CLI credentials written", path=str(path), user=name)


async def start_submit(settings: Settings, store: Store, bus: Bus, vitals: Vitals) -> web.AppRunner:
    if settings.virtual_clusters_path:
        for vc in load_config(Path(settings.virtual_clusters_path)):
            await store.put_vc(vc)
        log.info("virtual clusters loaded", path=settings.virtual_clusters_path)
    # The storage configs the submit check reads (routes/jobs.py): a bad file stops submit here, saying so,
    # as it stops the launcher, instead of answering 500 to the first job that names a storage.
    await asyncio.to_thread(storage_configs_at, settings.storage_config_path)
    users = Users(store, rounds=settings.password_hash_rounds)
    await bootstrap_admin(users, settings)
    runner = ApiRunner(create_app(SubmitDeps(settings=settings, store=store, bus=bus, users=users,
                                                vitals=vitals)),
                       access_log=None)
    await runner.setup()
    await listen(runner, settings.api_host, settings.api_port, serving="the REST API",
                 port_setting="PAIQ_API_PORT (paiq up --port)", host_setting="PAIQ_API_HOST")
    log.info("REST API listening", url=settings.api_url)
    return runner
