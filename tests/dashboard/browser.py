"""Drive headless Chromium over its DevTools pipe (`--remote-debugging-pipe`): no extra packages.

`--dump-dom` serialises the page before labml-app's cards have drawn (they render on
animation frames, which a DOM dump never runs), so the test talks to the browser
instead: load the page, wait until a condition holds in the page, then read the DOM
and take a screenshot.

A Chromium takes a second or more of CPU to start, so the tests share one (`Chromium`, a session
fixture in conftest.py) and each opens a `Browser` in it: a tab in a browser context of its own,
whose storage, cache and cookies start empty as a new profile's and go with it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
from dashboard_support import child_env

CHROMIUM = Path("/usr/bin/chromium")
REPLY_LIMIT_S = 120.0  # a cap on one DevTools reply, so that a browser that stops answering fails, not hangs
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-pipe"]


# How the page fits the window's width. `fits` is documentElement.clientWidth, the layout viewport
# less a classic vertical scrollbar (Debian's headless Chromium draws 15 px ones); innerWidth counts
# the scrollbar in, so a page too wide by the scrollbar's width would pass against it. `scrollbar` is that scrollbar's room
# (0 with overlay scrollbars, or with none), `past` the widest-reaching elements, for a failure's message.
WIDTHS = """(() => { const root = document.documentElement, fits = root.clientWidth;
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + [...el.classList].map(c => '.' + c).join('');
  const past = [...document.querySelectorAll('body *')].filter(el => el.getClientRects().length > 0)
    .map(el => ({el: name(el), right: Math.round(el.getBoundingClientRect().right)}))
    .filter(e => e.right > fits).sort((a, b) => b.right - a.right).slice(0, 5);
  return {wide: document.scrollingElement.scrollWidth, fits, inner: innerWidth,
          scrollbar: innerWidth - fits, tall: root.scrollHeight > root.clientHeight, past}; })()"""


class Chromium:
    """One headless Chromium, driven over its DevTools pipe; `tab()` opens a page in it."""

    def __init__(self, user_data_dir: Path, width: int = 1280, height: int = 1400) -> None:
        # Its crash handlers leave its session (they double-fork and setsid): its environment marks them.
        self._mark = os.urandom(8).hex()
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_pipes() -> None:
            # Chromium reads commands on fd 3 and writes replies on fd 4.
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={user_data_dir}", f"--window-size={width},{height}",
             "about:blank"],
            env=dict(child_env(), BROWSER_MARK=self._mark), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4, to_browser_r, from_browser_w), preexec_fn=wire_pipes, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0

    def _read_message(self, method: str, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if not select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise RuntimeError(f"chromium did not answer {method} within {REPLY_LIMIT_S:.0f} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed its DevTools pipe (exit code {self.proc.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """`method` of the browser, or of the page attached as `session`; its result."""
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            command["sessionId"] = session
        os.write(self._to_browser, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + REPLY_LIMIT_S  # events may come meanwhile: the cap is on the reply
        while True:
            message = self._read_message(method, deadline)
            if message.get("id") == self._next_id:  # everything else is an event
                if "error" in message:
                    raise RuntimeError(f'{method}: {message["error"]}')
                return message["result"]

    def tab(self, width: int = 1280, height: int = 1400) -> Browser:
        return Browser(self, width, height)

    def processes(self) -> set[int]:
        """Chromium's own processes: its session's (it starts and ends renderers for its pages as it
        sees fit) and those carrying its mark (its crash handlers, which leave the session)."""
        found = {self.proc.pid}
        for process in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):  # gone meanwhile, or not ours to read
                if os.getsid(process.pid) == self.proc.pid or process.environ().get("BROWSER_MARK") == self._mark:
                    found.add(process.pid)
        return found

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.call("Browser.close")
        except (OSError, RuntimeError):
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        # Chromium's helper processes share its session, its crash handlers its mark; leave none behind.
        helpers = self.processes() - {self.proc.pid}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


class Browser:
    """A page: a tab of a shared `Chromium` in a browser context of its own (closing it drops the
    context with its storage), or, given a profile folder, a Chromium of its own (docs/screenshots.py)."""

    def __init__(self, chromium: Chromium | Path, width: int = 1280, height: int = 1400) -> None:
        self._own: Chromium | None = None
        self._context: str | None = None
        if isinstance(chromium, Chromium):
            self._chromium = chromium
            self._context = chromium.call("Target.createBrowserContext")["browserContextId"]
        else:
            self._own = self._chromium = Chromium(chromium, width, height)
        target = self._chromium.call("Target.createTarget", {"url": "about:blank"} | (
            {} if self._context is None else {"browserContextId": self._context}))["targetId"]
        self._session = self._chromium.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """`method` of this page (`Browser.*` and `Target.*` go to the browser)."""
        session = None if method.startswith(("Target.", "Browser.")) else self._session
        return self._chromium.call(method, params, session)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    def load(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})

    def wait_until(self, expression: str, limit_s: float) -> bool:
        """Poll a JavaScript condition in the page; False if it never held within limit_s."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.evaluate(expression):
                return True
            time.sleep(0.2)
        return False

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            return
        with contextlib.suppress(OSError, RuntimeError):  # a browser that stopped answering fails its test elsewhere
            self._chromium.call("Target.disposeBrowserContext", {"browserContextId": self._context})

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
