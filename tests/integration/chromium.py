"""Headless Chromium driven over the DevTools protocol (a websocket, with aiohttp).

Just enough of the protocol for a test: open a page, evaluate JavaScript in it,
take a screenshot. The browser runs with a throw-away profile, no sandbox (we
are root in a container), no GPU and no background networking, so the only
traffic is what the page itself asks for.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def chromium_binary() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """One headless browser process with one page, driven over its websocket."""

    def __init__(self, binary: str, profile: Path, width: int = 1280, height: int = 800) -> None:
        self.binary = binary
        self.profile = profile
        self.width, self.height = width, height
        self.proc: subprocess.Popen[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: Any = None
        self._ids = itertools.count(1)
        self._tmp = ""

    async def __aenter__(self) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        self._tmp = tempfile.mkdtemp(prefix="seine-chromium-")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.profile / "chromium.log", "wb"),  # noqa: SIM115
            # its singleton socket dir goes to TMPDIR and stays there after the
            # browser: a short dir of our own (a socket path is at most 107 bytes,
            # the test's tmp dir is longer), removed on the way out
            env={**os.environ, "TMPDIR": self._tmp},
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(
                    "chromium did not open its DevTools port: "
                    + (self.profile / "chromium.log").read_text(errors="replace")[-2000:]
                )
            await asyncio.sleep(0.1)  # poll for the file Chromium writes when ready
        port = int(port_file.read_text().split()[0])
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json(content_type=None)
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (events in between are skipped)."""
        ident = next(self._ids)
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = await asyncio.wait_for(self._ws.receive(), 30)
            if message.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"devtools socket closed: {message!r}")
            data = json.loads(message.data)
            if data.get("id") == ident:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return dict(data.get("result", {}))

    async def open(self, url: str, ready: str = "true", deadline_s: float = 30) -> None:
        """Navigate and return once the document has loaded and `ready` (JS) is truthy.

        Page.navigate answers before the new document exists; evaluating at once
        may still run in about:blank, so wait on the document itself.
        """
        await self.call("Page.enable")
        await self.call("Page.navigate", url=url)
        check = (
            f"document.readyState === 'complete' && location.href === {json.dumps(url)}"
            f" && !!({ready})"
        )
        deadline = time.monotonic() + deadline_s
        while True:
            result = await self.call("Runtime.evaluate", expression=check, returnByValue=True)
            if result.get("result", {}).get("value") is True:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not load within {deadline_s} s ({ready})")
            await asyncio.sleep(0.1)  # poll the document; the browser decides when

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> Path:
        data = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(data["data"]))
        return path
