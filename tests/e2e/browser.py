"""A real headless Chromium, driven over the DevTools protocol (CDP), for the portal's end-to-end tests.

Why CDP and not ``--dump-dom``: the portal keeps the event feed (``/api/v1/events``) open, and Chromium's
``--virtual-time-budget`` waits for network fetches to finish, so ``--dump-dom`` and ``--screenshot`` on a
live page never return. CDP waits for what the test wants to see, in real time, and needs nothing beyond
aiohttp's websocket client (Playwright's browser download does not work here, and its Python package is not
a dependency). Clicks and typing go through ``Input.dispatchMouseEvent`` / ``Input.insertText``, so they hit
the element a user would hit, where it is drawn.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium")
# INFRA.md: the closed network refuses Chromium's own connections without the background flags.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                  "--window-size=1440,1000", "--remote-debugging-port=0"]
CALL_TIMEOUT_S = 15


class PageError(AssertionError):
    pass


class Page:
    """One Chromium tab over CDP: evaluate, wait for a condition, click, type, upload, screenshot."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.errors: list[str] = []  # uncaught exceptions, console.error, CSP and other script-side errors
        self.network: list[str] = []  # failed loads and 4xx/5xx answers: expected ones too, shown on a failure
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            future = self._pending.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
            else:
                self._note(data.get("method", ""), data.get("params", {}))
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the DevTools connection closed"))

    def _note(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(f"exception: {details.get('exception', {}).get('description') or details['text']}")
        elif method == "Runtime.consoleAPICalled" and params["type"] == "error":
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                            for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            if entry["source"] == "network":  # 4xx answers the page expects are "network" too
                self.network.append(f"{entry['text']} {entry.get('url', '')}".strip())
            else:
                self.errors.append(f"{entry['source']}: {entry['text']}")

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        answer = await asyncio.wait_for(future, CALL_TIMEOUT_S)
        if "error" in answer:
            raise PageError(f"{method} failed: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    async def eval(self, expression: str) -> Any:
        answer = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise PageError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def goto(self, url: str) -> None:
        """Load the page; again (at most twice more) when Chromium dropped its loads because the host's network
        changed meanwhile (ERR_NETWORK_CHANGED: another test's containers and networks come and go on this
        host), as a user would reload it."""
        for _ in range(3):
            seen = len(self.network)
            await self.call("Page.navigate", url=url)
            await self.wait("document.readyState === 'complete'", "the page to load")
            if await self._started(seen):
                return

    async def _started(self, seen: int) -> bool:
        """Whether the portal's scripts ran (its view shows something): False when a load failed because the
        network changed. A dropped module fails the page after readyState is complete, and its log entry may come
        later still, so this looks for either for a while; True if neither shows (the caller's waits report)."""
        drawn = "[...(document.querySelector('#view')?.children ?? [])].some((e) => e.tagName !== 'NOSCRIPT')"
        deadline = asyncio.get_running_loop().time() + 10
        while asyncio.get_running_loop().time() < deadline:
            if any("ERR_NETWORK_CHANGED" in n for n in self.network[seen:]):
                return False
            with contextlib.suppress(PageError):
                if await self.eval(drawn):
                    return True
            await asyncio.sleep(0.1)
        return True

    async def wait(self, expression: str, what: str, timeout_s: float = 20) -> Any:
        """Poll ``expression`` until it is truthy; its value. Fails naming ``what`` and the page's text."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            with contextlib.suppress(PageError):
                value = await self.eval(expression)
                if value:
                    return value
            if asyncio.get_running_loop().time() > deadline:
                text = await self.eval("document.body ? document.body.innerText : ''")
                raise PageError(f"waited {timeout_s}s for {what}; the page shows:\n{str(text)[:3000]}\n"
                                f"errors: {self.errors}\nnetwork errors: {self.network[-20:]}\n"
                                f"loads, the last 20 (path, ms, status): {await self._loads()}")
            await asyncio.sleep(0.1)

    async def _loads(self) -> Any:
        """The page's last 20 loads (scripts, API calls) with their time and status: what a blank page waited on."""
        with contextlib.suppress(PageError, TimeoutError):
            return await self.eval(
                "performance.getEntriesByType('resource').slice(-20).map(e => [e.name.replace(location.origin, ''),"
                " Math.round(e.duration), e.responseStatus])")
        return "unknown"

    async def text(self, selector: str) -> str:
        return str(await self.eval(f"document.querySelector({json.dumps(selector)}).innerText"))

    async def texts(self, selector: str) -> list[str]:
        return list(await self.eval(f"[...document.querySelectorAll({json.dumps(selector)})].map(e => e.innerText)"))

    async def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element once it is visible, on top, and still.

        Still: at the same place in two looks 0.1 s apart. A page still drawing (a job page whose status arrives
        after its panels) moves what is below, and a click at the old place lands on something else."""
        probe = (f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
                 " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                 " if (!r.width || !r.height) return null; const x = r.x + r.width / 2, y = r.y + r.height / 2;"
                 " const top = document.elementFromPoint(x, y);"
                 " return top && (top === e || e.contains(top)) ? {x, y} : null; })()")
        deadline = asyncio.get_running_loop().time() + 20
        box, previous = await self.wait(probe, f"{selector} to be visible"), None
        while box != previous:
            if asyncio.get_running_loop().time() > deadline:
                raise PageError(f"{selector} kept moving for 20 s (last at {box})")
            await asyncio.sleep(0.1)
            box, previous = await self.wait(probe, f"{selector} to be visible"), box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"], button="left",
                            clickCount=1)

    async def type(self, selector: str, text: str) -> None:
        """Focus the field with a click, select what it holds, and type ``text`` over it."""
        await self.click(selector)
        await self.eval(f"document.querySelector({json.dumps(selector)}).select()")
        await self.call("Input.insertText", text=text)

    async def press_enter(self) -> None:
        for kind in ("keyDown", "keyUp"):
            await self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                            **({"text": "\r"} if kind == "keyDown" else {}))

    async def upload(self, selector: str, path: Path) -> None:
        root = await self.call("DOM.getDocument")
        node = await self.call("DOM.querySelector", nodeId=root["root"]["nodeId"], selector=selector)
        await self.call("DOM.setFileInputFiles", files=[str(path)], nodeId=node["nodeId"])

    async def screenshot(self) -> bytes:
        """The whole page as a PNG."""
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        return base64.b64decode(shot["data"])

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


def _devtools_port(profile: str) -> str | None:
    """The port Chromium writes to its profile's DevToolsActivePort file once it listens."""
    with contextlib.suppress(FileNotFoundError):
        lines = (Path(profile) / "DevToolsActivePort").read_text().split()
        return lines[0] if lines else None
    return None


async def _page_target(http: aiohttp.ClientSession, proc: asyncio.subprocess.Process, profile: str) -> str:
    """The DevTools websocket URL of the browser's tab."""
    while (port := _devtools_port(profile)) is None:
        if proc.returncode is not None:
            raise PageError(f"chromium exited with {proc.returncode}")
        await asyncio.sleep(0.05)
    while True:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            pages = [t for t in await resp.json() if t["type"] == "page"]
        if pages:
            return str(pages[0]["webSocketDebuggerUrl"])
        await asyncio.sleep(0.05)


async def _end_group(proc: asyncio.subprocess.Process) -> None:
    """End Chromium, then its helper processes (its own process group, killed: the profile is thrown away)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), 10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # a killed process writes nothing more into the profile
    await proc.wait()


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Page]:
    """Debian's Chromium, headless, with a fresh profile; its one tab as a :class:`Page`."""
    if CHROMIUM is None:
        raise PageError("Chromium is not installed: apt-get install -y chromium (tests/run.sh does)")
    with tempfile.TemporaryDirectory(prefix="paiq-chromium-", ignore_cleanup_errors=True) as profile:
        proc = await asyncio.create_subprocess_exec(
            CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        try:
            async with aiohttp.ClientSession() as http:
                async with asyncio.timeout(20):
                    url = await _page_target(http, proc, profile)
                ws = await http.ws_connect(url, max_msg_size=0)
                page = Page(ws)
                for domain in ("Page", "Runtime", "Log", "DOM"):
                    await page.call(f"{domain}.enable")
                try:
                    yield page
                finally:
                    await page.close()
        finally:
            await _end_group(proc)
