"""The browser tests' Chromium: one per module, a fresh context per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .browser import chromium_browser


@pytest.fixture(scope="module")
def chromium_process() -> Iterator[Any]:
    """One headless Chromium for the browser tests of a module; each test takes a fresh
    context of it (`browser_context`: no cookie, storage or cache of another test), which
    costs a tenth of a launch.

    Module scope, not session: while Playwright's sync driver is up it marks the thread's
    asyncio loop as running, so `asyncio.run` would fail in any test of another module that
    an xdist worker runs meanwhile; the browser modules run no asyncio of their own.
    """
    with chromium_browser() as chromium:
        yield chromium
