"""The process's own routes: readiness, liveness, Prometheus metrics, and OpenPAI's API root."""

from __future__ import annotations

from aiohttp import web

from services.submit.contract.route import Reply, Route, text
from services.submit.deps import DEPS
from shared.ops.metrics import health_metrics_response, health_response
from shared.ops.vitals import HealthReport


async def healthz(request: web.Request) -> web.Response:
    """The process's health (``paiq up``: of every service in it); 503 while it cannot do its work."""
    return health_response(await request.app[DEPS].vitals.report())


async def livez(request: web.Request) -> web.Response:
    """Whether the process should be restarted (a loop ended), whatever its database and broker do."""
    return health_response(request.app[DEPS].vitals.liveness())


async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics, the process's health (``paiq_healthy``, checks, roles) among them as of now."""
    return await health_metrics_response(request.app[DEPS].vitals.report)


async def api_root(request: web.Request) -> web.Response:
    """OpenPAI's ``/api/v1`` answered this HTML line (its ``controllers/index.js``); clients probe it."""
    return web.Response(text="<pre>PAI RESTful API</pre>", content_type="text/html")


# A health report is the answer either way: 503 carries the same report (not an error).
ROUTES = (
    Route("GET", "/healthz", healthz, "readiness: the database and broker reachable and every loop working",
          {200: Reply("healthy", HealthReport), 503: Reply("unhealthy: reason says the first problem", HealthReport)}),
    Route("GET", "/livez", livez, "liveness: unhealthy only once a loop has ended (restart the process)",
          {200: Reply("alive", HealthReport), 503: Reply("a loop ended: restart the process", HealthReport)}),
    Route("GET", "/metrics", metrics, "Prometheus metrics", {200: text("metrics in the Prometheus text format")}),
    Route("GET", "/api/v1", api_root, "OpenPAI's API root", {200: text("<pre>PAI RESTful API</pre>", "text/html")}),
)
