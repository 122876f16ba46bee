"""Open nsysmap's HTML pages in a headless Chromium, offline, and check or photograph them.

Chromium is driven over the DevTools protocol through a pipe
(`--remote-debugging-pipe`: commands on fd 3, replies on fd 4, each message
JSON ended by a NUL byte), so no port and no extra package is needed. Every
network request is refused (an unreachable proxy, names that resolve
nowhere) and recorded, so a page that tries to fetch anything is caught.

    python -m devtools.browser PAGE.html SHOT.png   # a screenshot

Used by the browser tests and `make screenshots`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import queue
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsysmap.core.errors import ToolMissing

NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
OFFLINE = (
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-extensions",
    "--disable-sync",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-pipe",
    *OFFLINE,
)
# What the page shows once loaded: chart containers, those Plotly drew into, tables.
CHECK = """(() => {
  const charts = [...document.querySelectorAll("div.chart")];
  const drawn = charts.filter(
    d => d.querySelector(".main-svg") && d.getBoundingClientRect().height > 50);
  return JSON.stringify({
    charts: charts.map(d => d.id),
    drawn: drawn.map(d => d.id),
    tables: document.querySelectorAll("table.sortable").length,
    height: Math.ceil(document.documentElement.scrollHeight),
  });
})()"""

# Distinct colours among every 37th pixel of a PNG, decoded by the browser itself.
COLOURS = """(async () => {
  const img = new Image();
  img.src = "data:image/png;base64,PNG";
  await img.decode();
  const canvas = document.createElement("canvas");
  canvas.width = img.width;
  canvas.height = img.height;
  const context = canvas.getContext("2d");
  context.drawImage(img, 0, 0);
  const px = context.getImageData(0, 0, img.width, img.height).data;
  const seen = new Set();
  for (let i = 0; i < px.length; i += 4 * 37) {
    seen.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2]);
  }
  return seen.size;
})()"""


def find_chromium() -> str | None:
    """The Chromium executable on PATH (or $NSYSMAP_CHROMIUM), None when there is none."""
    given = os.environ.get("NSYSMAP_CHROMIUM")
    if given:
        return shutil.which(given) or (given if Path(given).is_file() else None)
    return next((path for name in NAMES if (path := shutil.which(name))), None)


@dataclass
class PageResult:
    """What a page did when opened: errors, network attempts, charts drawn, a screenshot."""

    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # URLs other than file: and data:
    charts: list[str] = field(default_factory=list)  # ids of chart containers
    drawn: list[str] = field(default_factory=list)  # ... that Plotly drew into
    tables: int = 0
    height: int = 0
    screenshot: bytes = b""
    colours: int = 0  # distinct colours among sampled pixels of the screenshot
    probe: Any = None  # the value of the caller's own script, run last

    @property
    def empty(self) -> list[str]:
        return [c for c in self.charts if c not in self.drawn]


class Chromium:
    """A headless Chromium for the duration of a `with` block."""

    def __init__(self, executable: str | None = None, timeout_s: float = 30.0) -> None:
        found = executable or find_chromium()
        if found is None:
            raise ToolMissing("no Chromium on PATH (apt-get install chromium)")
        self.executable = found
        self.timeout_s = timeout_s
        self._ids = 0
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        self._profile = tempfile.TemporaryDirectory(prefix="nsysmap-chromium-")
        to_child, self._to_child = os.pipe()
        self._from_child, from_child = os.pipe()

        def child_fds() -> None:  # commands on fd 3, replies on fd 4
            a, b = os.dup(to_child), os.dup(from_child)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=child_fds,  # the reader thread starts after the fork
        )
        os.close(to_child)
        os.close(from_child)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            self.send("Browser.close")
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_child)
        self._profile.cleanup()

    def _read(self) -> None:
        buffer = b""
        with os.fdopen(self._from_child, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for message in messages:
                    self._inbox.put(json.loads(message))
        self._inbox.put(None)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """One DevTools command; returns its result (events meanwhile are kept)."""
        self._ids += 1
        message: dict[str, Any] = {"id": self._ids, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._next(deadline)
            if reply.get("id") == self._ids:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self._events.append(reply)

    def _next(self, deadline: float) -> dict[str, Any]:
        try:
            reply = self._inbox.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise TimeoutError("Chromium did not answer in time") from None
        if reply is None:
            raise RuntimeError("Chromium closed its DevTools pipe")
        return reply

    def _wait_event(self, session: str, method: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        seen = lambda: any(  # noqa: E731
            e.get("method") == method and e.get("sessionId") == session for e in self._events
        )
        while not seen():
            self._events.append(self._next(deadline))

    def open(
        self,
        page: Path,
        width: int = 1280,
        height: int = 900,
        max_height: int = 16000,
        probe: str | None = None,
        draw_s: float | None = None,
    ) -> PageResult:
        """Open `page` from disk, wait for its charts, collect what went wrong, photograph it.

        The screenshot is of the whole page, cut at `max_height` pixels; `probe`
        is a script run last, its value kept in `PageResult.probe`; charts get
        `draw_s` seconds to appear after the load event (default: the timeout).
        """
        url = page.resolve().as_uri()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.send("Emulation.setDeviceMetricsOverride", metrics, session)
        self._events.clear()
        self.send("Page.navigate", {"url": url}, session)
        self._wait_event(session, "Page.loadEventFired")
        result = PageResult(url)
        self._settle(result, session, self.timeout_s if draw_s is None else draw_s)
        metrics["height"] = max(height, min(result.height, max_height))
        self.send("Emulation.setDeviceMetricsOverride", metrics, session)
        time.sleep(0.3)  # let responsive charts redraw at the new size
        png = self.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
        result.screenshot = base64.b64decode(png)
        if probe is not None:
            result.probe = self.evaluate(probe, session)
        result.colours = self.evaluate(COLOURS.replace("PNG", png), session, wait=True)
        self._collect(result, session)
        self.send("Target.closeTarget", {"targetId": target})
        return result

    def _settle(self, result: PageResult, session: str, draw_s: float) -> None:
        """Poll until every chart is drawn (or `draw_s` seconds have passed)."""
        deadline = time.monotonic() + draw_s
        while True:
            state = json.loads(self.evaluate(CHECK, session))
            result.charts, result.drawn = state["charts"], state["drawn"]
            result.tables, result.height = state["tables"], state["height"]
            if not result.empty or time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def evaluate(self, expression: str, session: str, wait: bool = False) -> Any:
        """The value of a script in the page (`wait`: of the promise it returns)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": wait}
        reply = self.send("Runtime.evaluate", params, session)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"page script failed: {reply['exceptionDetails'].get('text')}")
        return reply["result"].get("value")

    def _collect(self, result: PageResult, session: str) -> None:
        for event in self._events:
            if event.get("sessionId") != session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                text = details.get("exception", {}).get("description") or details.get("text")
                result.errors.append(f"exception: {text}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                args = [a.get("value", a.get("description")) for a in params.get("args", [])]
                result.errors.append(f"console.error: {args}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                result.errors.append(f"log: {params['entry'].get('text')}")
            elif method == "Network.requestWillBeSent":
                request_url = params.get("request", {}).get("url", "")
                if not request_url.startswith(("file:", "data:", "about:", "blob:")):
                    result.requests.append(request_url)


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, from its header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Screenshot an nsysmap HTML page, offline.")
    parser.add_argument("page", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900, help="viewport height")
    parser.add_argument("--max-height", type=int, default=16000, help="cut the page here")
    args = parser.parse_args(argv)
    with Chromium() as browser:
        result = browser.open(args.page, args.width, args.height, args.max_height)
    problems = result.errors + [f"request: {u}" for u in result.requests]
    problems += [f"chart not drawn: {c}" for c in result.empty]
    if problems:
        raise SystemExit("nsysmap: " + "; ".join(problems))
    args.png.parent.mkdir(parents=True, exist_ok=True)
    args.png.write_bytes(result.screenshot)
    print(f"wrote {args.png} ({len(result.drawn)} charts)")


if __name__ == "__main__":
    main()
