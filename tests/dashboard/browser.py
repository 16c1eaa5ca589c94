"""A real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright, and a
`jobfsm dashboard` process to point it at. Playwright never downloads a browser here."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fsm.cli.dashboard_cmd import TOKEN_ENV
from tests.conftest import need_program

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("JOBFSM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
#: seconds the dashboard process may take to accept connections
START_TIMEOUT = 30.0
#: where screenshots go when JOBFSM_SCREENSHOTS=1 (docs/dashboard.md shows them)
IMAGES = ROOT / "docs" / "images"


def need_chromium() -> str:
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        need_program("chromium", "apt-get install -y chromium")
    return CHROMIUM if Path(CHROMIUM).exists() else str(shutil.which("chromium"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PortTaken(AssertionError):
    """Another process took the port between `free_port()` and the dashboard's bind."""


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds a listening TCP socket on `port` (Linux: the socket
    inodes of /proc/net/tcp* in the LISTEN state matched against the process's fds).
    A port that accepts connections may be another process's: a test talks only to the
    dashboard it started."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


@contextmanager
def dashboard_process(
    store: str,
    *args: str,
    log: Path,
    env: dict[str, str] | None = None,
    port: int | None = None,
    scheme: str = "http",
) -> Iterator[str]:
    """`jobfsm dashboard --store STORE ARGS` on a free port; yields its base URL.
    `env` adds to the environment (which never holds a store URL or a token here)."""
    port = port or free_port()
    argv = [sys.executable, "-m", "fsm.cli", "dashboard", "--store", store, "--port", str(port)]
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("JOBFSM_STORE", TOKEN_ENV)},
        **(env or {}),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                said = log.read_text()[-2000:]
                taken = "address already in use" in said.lower()
                raise (PortTaken if taken else AssertionError)(f"dashboard exited: {said}")
            # up when it is this process that listens (not whoever took the port first)
            if listens(proc.pid, port):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"dashboard not up in {START_TIMEOUT}s")
            time.sleep(0.1)
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


#: the window every page is laid out in (the screenshots in docs/images/ are this wide)
VIEWPORT = {"width": 1400, "height": 900}


@contextmanager
def playwright_driver() -> Iterator[Any]:
    """Playwright's sync driver (one node process). While it is up it marks the thread's
    asyncio loop as running: a second driver, or `asyncio.run`, fails in the meantime,
    so the tests of a module share one (tests/dashboard/conftest.py)."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        yield pw


@contextmanager
def chromium_browser(driver: Any, *extra_args: str) -> Iterator[Any]:
    """One headless Chromium of `driver`, for many contexts (`browser_context`).

    A launch costs about a second of CPU; a context a tenth of that, and it is as empty
    as a fresh profile: its own cookies, storage and cache.
    """
    launched = driver.chromium.launch(
        executable_path=need_chromium(), args=[*CHROMIUM_ARGS, *extra_args], headless=True
    )
    try:
        yield launched
    finally:
        launched.close()


@contextmanager
def browser_context(chromium: Any) -> Iterator[Any]:
    """A fresh context of a running Chromium: no cookie, storage or cache of another test."""
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        yield context
    finally:
        context.close()


def screenshot(page: Any, name: str, tmp: Path) -> Path:
    """Save a full-page PNG (into docs/images/ when JOBFSM_SCREENSHOTS=1); return its path."""
    folder = IMAGES if os.environ.get("JOBFSM_SCREENSHOTS") == "1" else tmp
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"dashboard-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def token_file(folder: Path, tokens: dict[str, str]) -> Path:
    """A token file of `NAME:TOKEN` lines, readable by its owner only."""
    path = folder / "dashboard-tokens"
    path.write_text("".join(f"{name}:{token}\n" for name, token in tokens.items()))
    path.chmod(0o600)
    return path
