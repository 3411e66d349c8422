"""Answers whose body is written as it comes (``web.StreamResponse``: the event feed, a task's log).

aiohttp answers HEAD with a GET's handler (``add_get``) and leaves a stream's body to the handler: what it
writes after a HEAD answer's headers goes out on the connection with no framing (no chunking, no length), and
the client reads it as the start of its next answer. A streaming handler therefore opens its answer with
:func:`open_stream`, which sends the status and headers and, for a HEAD, ends the answer there.
"""

from __future__ import annotations

from aiohttp import hdrs, web


async def open_stream(request: web.Request, response: web.StreamResponse) -> bool:
    """Send ``response``'s status and headers; whether its body is to follow (False for a HEAD: the answer is
    then complete, and the handler returns it without writing)."""
    await response.prepare(request)
    if request.method == hdrs.METH_HEAD:
        await response.write_eof()
        return False
    return True
