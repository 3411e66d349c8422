"""The headers the API's answers carry whatever their handler: on every answer ``X-Content-Type-Options:
nosniff`` (a browser takes the type said and guesses no other: a task's log, a job's name in an error, never
run as HTML or script), and on every answer of a route that hands out a secret (a token, the SSH private key,
a webhook's signing key; ``Route.secret``) ``Cache-Control: no-store``, so no cache, the browser's included,
keeps it. Set in one place for the app's answers (:func:`services.submit.app.api_headers`, as each answer is
prepared: streams, errors, 404 and 405 included) and for those aiohttp makes before the app
(:mod:`services.submit.contract.httpparser`)."""

from __future__ import annotations

from aiohttp import web

EVERY_ANSWER = {"X-Content-Type-Options": "nosniff"}
SECRET_ANSWER = {"Cache-Control": "no-store"}


def stamp(response: web.StreamResponse, *, secret: bool) -> None:
    """Give ``response`` (not yet sent) the headers every answer carries, and a secret's where it holds one."""
    response.headers.update(EVERY_ANSWER)
    if secret:
        response.headers.update(SECRET_ANSWER)
