"""The book tests' fixtures: one headless Chromium per module and the served two-profile book."""

from __future__ import annotations

import pytest

from tests.support.browser import ARGS, require_chromium, serve


@pytest.fixture(scope="module")
def browser():
    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def site(built_book):
    root, _ = built_book
    with serve(root / "_build" / "html") as base:
        yield root, base
