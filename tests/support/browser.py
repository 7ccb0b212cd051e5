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


def open_page(browser, url):
    """Open ``url`` with every off-host request blocked and recorded; return page, errors, off-host."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    offhost = block_offhost(page)
    page.goto(url, wait_until="load")
    return page, errors, offhost
