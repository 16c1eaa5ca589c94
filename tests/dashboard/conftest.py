"""The browser tests' Playwright driver and Chromium: one per module, a fresh context
per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .browser import chromium_browser, playwright_driver


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    """Playwright's sync driver for the browser tests of a module.

    Module scope, not session: while the driver is up it marks the thread's asyncio loop
    as running, so `asyncio.run` (or a second driver) would fail in a test of another
    module that an xdist worker runs meanwhile; the browser modules run no asyncio of
    their own, and every browser test of a module launches from this one driver.
    """
    with playwright_driver() as driver:
        yield driver


@pytest.fixture(scope="module")
def chromium_process(playwright: Any) -> Iterator[Any]:
    """One headless Chromium for the browser tests of a module; each test takes a fresh
    context of it (`browser_context`), which costs a tenth of a launch."""
    with chromium_browser(playwright) as chromium:
        yield chromium
