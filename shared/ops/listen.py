"""Listen on a TCP port, failing in one line that names the port, what it was for and the setting to change."""

from __future__ import annotations

import errno

from aiohttp import web

from shared.errors import ListenError

PORT_TAKEN = "another process holds that port"  # in the message; a supervisor (or a test) may look for it
_WHY = {errno.EADDRINUSE: PORT_TAKEN, errno.EACCES: "a port below 1024 needs root"}


async def listen(runner: web.BaseRunner, host: str, port: int, *, serving: str, port_setting: str,
                 host_setting: str) -> None:
    """Start serving ``runner`` on host:port. ListenError, and the runner cleaned up, if the port cannot be had."""
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as e:
        await runner.cleanup()
        if e.errno == errno.EADDRNOTAVAIL:
            advice = f"that address is not one of this host's; choose another with {host_setting}"
        else:
            advice = f"{_WHY.get(e.errno or 0, e.strerror or str(e))}; choose another port with {port_setting}"
        raise ListenError(f"cannot listen on {host}:{port} for {serving}: {advice}") from None
