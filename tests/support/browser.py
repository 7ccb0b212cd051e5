"""What the browser tests share: Debian's Chromium, a quiet local server, off-host blocking."""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def require_chromium() -> str:
    """Return Chromium's path; skip without it, or fail when CI requires the browser tests."""
    if not CHROMIUM:
        message = "Chromium not found: install it with 'apt-get install chromium' to run the browser tests"
        if os.environ.get("KVOFFLOAD_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on a free local port; yield its base URL."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def block_offhost(page) -> list[str]:
    """Abort every request to another host on ``page``; return the list they are recorded in."""
    offhost: list[str] = []

    def route(r):
        if urlparse(r.request.url).hostname not in ("127.0.0.1", None):
            offhost.append(r.request.url)
            return r.abort()
        return r.continue_()

    page.route("**/*", route)
    return offhost


class Tab:
    """One browser tab that opens page after page, as a reader's does (its cache warm, one
    renderer): for the page it opened last, ``messages`` holds the console's errors (and
    warnings, if asked) and uncaught errors, ``offhost`` the requests to another host, all
    blocked. A new context per page costs a renderer's start and a cold cache each time."""

    def __init__(self, browser, warnings: bool = False, init_script: str = "", **context):
        self.page = browser.new_page(**context)  # in a context of its own, closed with it
        if init_script:
            self.page.add_init_script(init_script)
        self.messages: list[str] = []
        kinds = ("error", "warning") if warnings else ("error",)
        self.page.on(
            "console",
            lambda m: self.messages.append(f"{m.type}: {m.text}") if m.type in kinds else None,
        )
        self.page.on("pageerror", lambda e: self.messages.append(f"pageerror: {e}"))
        self.offhost = block_offhost(self.page)

    def open(self, url: str, viewport: dict | None = None):
        """Open ``url`` (at ``viewport``, if given); return the page, its messages, off-host."""
        self.messages.clear()
        self.offhost.clear()
        if viewport:
            self.page.set_viewport_size(viewport)
        self.page.goto(url, wait_until="load")
        return self.page, self.messages, self.offhost

    def close(self) -> None:
        """Close the tab and its context."""
        self.page.close()

    def __enter__(self) -> Tab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_page(browser, url):
    """Open ``url`` in a fresh tab (cold cache); return the page, its errors and off-host requests."""
    return Tab(browser).open(url)
