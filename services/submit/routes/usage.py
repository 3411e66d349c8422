"""Usage reports (paiq's extension): GPU-hours held and used, CPU core-hours, jobs and attempts per UTC day,
per virtual cluster and user, from the daily rollups written as jobs end (shared/db/usage.py), never from
the jobs themselves.

``GET /api/v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD[&by=user|vc][&vc=V][&user=U][&format=json|csv]``: a token
is needed; administrators see everyone, a user their own rows and those of the virtual clusters they may use
(:func:`shared.usage.report.row_filters`). ``to`` defaults to today (UTC), ``from`` to 30 days before it; a
report covers at most 92 days.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from services.submit.contract.answers import answer
from services.submit.contract.route import STRING, Param, Reply, Route
from services.submit.contract.usage import UsageReport, row_view
from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from services.submit.routes.access import principal_of
from shared.scheduling.vclusters import with_default
from shared.usage.days import MAX_REPORT_DAYS, RangeProblem, day_range
from shared.usage.report import Asked, Asker, Refusal, csv_text, row_filters, sorted_rows

NAME_MAX = 256  # longer than any user or VC name paiq takes


def _choice(request: web.Request, name: str, choices: tuple[str, ...]) -> str:
    value = request.query.get(name) or choices[0]
    if value not in choices:
        raise ApiError("InvalidParametersError", f"{name}: must be one of {', '.join(choices)}, not {shown(value)}")
    return value


def _name(request: web.Request, name: str) -> str | None:
    value = request.query.get(name) or None
    if value is not None and (len(value) > NAME_MAX or not value.isprintable()):
        raise ApiError("InvalidParametersError", f"{name}: {shown(value)} is no {name} paiq knows")
    return value


async def get_usage(request: web.Request) -> web.StreamResponse:
    principal = await principal_of(request)
    days = day_range(request.query.get("from") or None, request.query.get("to") or None,
                     dt.datetime.now(dt.UTC).date())
    if isinstance(days, RangeProblem):
        raise ApiError("InvalidParametersError", days.message)
    by = "vc" if _choice(request, "by", ("user", "vc")) == "vc" else "user"
    csv = _choice(request, "format", ("json", "csv")) == "csv"
    asked = Asked(by=by, vc=_name(request, "vc"), user=_name(request, "user"))
    store = request.app[DEPS].store
    mine = () if principal.admin else tuple(
        vc.name for vc in with_default(await store.list_vcs()).values() if vc.admits(principal.user, principal.groups))
    filters = row_filters(Asker(user=principal.user, admin=principal.admin, vcs=mine), asked)
    if isinstance(filters, Refusal):
        if filters.status == 403:
            raise ApiError("ForbiddenUserError", filters.message)
        raise ApiError("InvalidParametersError", filters.message)
    rows = sorted_rows(await store.usage.rows(days, filters, by_vc=by == "vc"))
    first, last = days.bounds()
    if csv:
        return web.Response(text=csv_text(rows), content_type="text/csv", headers={
            "Content-Disposition": f'attachment; filename="paiq-usage-{by}-{first}-{last}.csv"'})
    return answer(UsageReport(from_day=first, to_day=last, by=by, rows=tuple(row_view(r) for r in rows)))


_DAY = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}

ROUTES = (
    Route("GET", "/api/v1/usage", get_usage, "paiq: usage per UTC day, virtual cluster and user (by=user) or virtual "
          "cluster (by=vc): GPU-hours held, used and measured, CPU core-hours held and used, jobs and attempts ended; "
          f"administrators see everyone, a user their own and their virtual clusters'; at most {MAX_REPORT_DAYS} days",
          {200: Reply("the report (format=csv: the same rows as CSV)", UsageReport, content={"text/csv": STRING})},
          (400, 401, 403), auth="token", params=(
              Param("from", "query", _DAY, "the first UTC day, YYYY-MM-DD (default: 29 days before to)"),
              Param("to", "query", _DAY, "the last UTC day, YYYY-MM-DD (default: today)"),
              Param("by", "query", {"type": "string", "enum": ["user", "vc"], "default": "user"},
                    "rows per virtual cluster and user, or per virtual cluster (every user summed)"),
              Param("vc", "query", description="only this virtual cluster"),
              Param("user", "query", description="only this user (by=user)"),
              Param("format", "query", {"type": "string", "enum": ["json", "csv"], "default": "json"}))),
)
