"""The readable lifecycle (issue 35, item 1) in a real headless Chromium against a real
SQLite file: the grouped top-down drawing with live counts equal to the store's, pan and
zoom from the vendored svg-pan-zoom, a state's click leading to its jobs, the window
choice, and a job page drawing the job's own path with the whole machine on demand.

`JOBFSM_SCREENSHOTS=1` writes the screenshots into docs/images/.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm import Engine, open_store

from .browser import browser_context, dashboard_process, screenshot, token_file
from .clients import TOKENS
from .seed import OWNER_A, seed

WAIT_MS = 15_000


@pytest.fixture
def seeded(sqlite_url: str) -> Iterator[tuple[str, Engine, dict[str, str]]]:
    store = open_store(sqlite_url)
    try:
        engine = Engine(store)
        yield sqlite_url, engine, seed(engine)
    finally:
        store.close()


@pytest.fixture
def chromium(chromium_process: Any) -> Iterator[Any]:
    with browser_context(chromium_process) as context:
        context.set_default_timeout(WAIT_MS)
        yield context


def _page(chromium: Any, base: str) -> tuple[Any, list[str]]:
    """A logged-in page, and the console messages it logs (CSP refusals show there)."""
    page = chromium.new_page()
    messages: list[str] = []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.goto(base + "/login")
    page.fill("input[name=token]", TOKENS["carol"])
    page.click("#login button[type=submit]")
    page.wait_for_selector("#operator")
    return page, messages


def _until(check: Callable[[], bool], what: str) -> None:
    """Wait for `check()` (svg-pan-zoom draws on the next animation frame)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not check():
        assert time.monotonic() < deadline, f"not {what} in {WAIT_MS} ms"
        time.sleep(0.05)


def _texts(locator: Any) -> str:
    """The text lines of an SVG element (one per <text>), joined by newlines."""
    return str(
        locator.evaluate(
            "el => Array.from(el.querySelectorAll('text')).map(t => t.textContent).join('\\n')"
        )
    )


def _scale(page: Any, box: str) -> float:
    transform = page.locator(f"{box} g.svg-pan-zoom_viewport").get_attribute("transform") or ""
    if not transform:
        style = page.locator(f"{box} g.svg-pan-zoom_viewport").get_attribute("style") or ""
        transform = style
    found = re.search(r"matrix\(([-\d.e]+)", transform)
    assert found is not None, transform
    return float(found.group(1))


def _translate(page: Any, box: str) -> tuple[float, float]:
    g = page.locator(f"{box} g.svg-pan-zoom_viewport")
    text = (g.get_attribute("transform") or "") + (g.get_attribute("style") or "")
    found = re.search(
        r"matrix\(([-\d.e]+)[ ,]+([-\d.e]+)[ ,]+([-\d.e]+)[ ,]+([-\d.e]+)"
        r"[ ,]+([-\d.e]+)[ ,]+([-\d.e]+)",
        text,
    )
    assert found is not None, text
    return float(found.group(5)), float(found.group(6))


def test_the_lifecycle_page_draws_live_counts_pans_zooms_and_leads_to_a_states_jobs(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    tokens = token_file(tmp_path, TOKENS)
    with dashboard_process(url, "--token-file", str(tokens), log=tmp_path / "d.log") as base:
        page, messages = _page(chromium, base)
        page.goto(base + "/diagram")
        page.wait_for_selector("#lifecycle[data-pan-zoom=ready]")
        # every state is drawn with how many jobs the store holds in it now
        per_state: dict[str, int] = {}
        for (_queue, state), n in engine.counts().items():
            per_state[state] = per_state.get(state, 0) + n
        for state in engine.spec.states:
            node = page.locator(f"#lifecycle g#state-{state}")
            assert node.count() == 1, state
            assert f"{per_state.get(state, 0)} now" in _texts(node), state
        # each event line shows the store's count for the window (the last hour)
        counted = {
            (c.from_state, c.event, c.to_state): c.count
            for c in engine.store.recent_transitions(engine.clock.now() - 3600)  # type: ignore[attr-defined]
            if c.outcome == "applied"
        }
        ambiguous = counted[("running", "ambiguous", "investigate")]
        assert ambiguous == 2
        edge = page.locator("#lifecycle g#edge-running-investigate")
        assert f"ambiguous: {ambiguous}" in _texts(edge)
        # the cross-cutting events are listed under the drawing with their counts
        deadline = page.locator("#wide-deadline-failed")
        assert deadline.count() == 1
        cancels = sum(
            n for (_s, ev, to), n in counted.items() if ev == "cancel" and to == "cancelled"
        )
        assert page.locator("#wide-cancel-cancelled td.num").inner_text() == str(cancels)
        # laid out top-down: intake above run above the terminal states
        y = {
            s: page.locator(f"#lifecycle g#state-{s}").bounding_box()["y"]
            for s in ("queued", "running", "succeeded")
        }
        assert y["queued"] < y["running"] < y["succeeded"]
        screenshot(page, "lifecycle", tmp_path)
        # zoom in with the toolbar, pan by dragging, fit again
        before = _scale(page, "#lifecycle")
        page.click(".zoom-bar button[data-zoom=in]")
        _until(lambda: _scale(page, "#lifecycle") > before * 1.1, "zoomed in")
        box = page.locator("#lifecycle").bounding_box()
        x0, y0 = _translate(page, "#lifecycle")
        page.mouse.move(box["x"] + 40, box["y"] + 40)
        page.mouse.down()
        page.mouse.move(box["x"] + 240, box["y"] + 140, steps=8)
        page.mouse.up()
        _until(lambda: _translate(page, "#lifecycle")[0] - x0 > 100, "panned right")
        assert _translate(page, "#lifecycle")[1] - y0 > 50
        page.click(".zoom-bar button[data-zoom=fit]")
        _until(lambda: abs(_scale(page, "#lifecycle") - before) < 0.01, "fitted again")
        # the wheel zooms too
        page.mouse.move(box["x"] + 300, box["y"] + 300)
        page.mouse.wheel(0, -400)
        _until(lambda: _scale(page, "#lifecycle") > before * 1.1, "zoomed by the wheel")
        # a click on a state lists its jobs
        page.click(".zoom-bar button[data-zoom=fit]")
        page.locator("#lifecycle g#state-investigate").click()
        page.wait_for_url(re.compile(r".*/jobs\?state=investigate$"))
        listed = page.locator("#job-list").inner_text()
        assert ids["investigate"] in listed
        assert ids["investigate2"] in listed
        assert ids["queued"] not in listed
        # another window: the page counts over it and says so
        page.goto(base + "/diagram")
        page.select_option("select[name=window]", "1d")
        page.click("#window-form button")
        page.wait_for_url(re.compile(r".*/diagram\?window=1d$"))
        assert "last 1d" in _texts(page.locator("#lifecycle svg"))
        assert page.goto(base + "/diagram?window=2y").status == 400
        # nothing the page does is refused by its Content-Security-Policy
        assert not [m for m in messages if "Content Security Policy" in m], messages


def test_a_job_page_draws_its_own_path_and_the_whole_machine_on_demand(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    # a failed job requeued by an operator and run again: its path enters queued,
    # leased and running twice, and ends in succeeded
    job_id = ids["failed"]
    engine.requeue(job_id, actor="carol", reason="address fixed", attempts=1)
    (leased,) = engine.claim(OWNER_A, ["default"], limit=1, ids=[job_id])
    engine.start(job_id, leased.fence)
    engine.succeed(job_id, leased.fence, result={"sent": True})
    tokens = token_file(tmp_path, TOKENS)
    with dashboard_process(url, "--token-file", str(tokens), log=tmp_path / "d.log") as base:
        page, messages = _page(chromium, base)
        page.goto(f"{base}/jobs/{job_id}")
        page.wait_for_selector("#path[data-pan-zoom=ready]")
        applied = [e for e in engine.history(job_id) if e.outcome == "applied"]
        steps = page.locator("#path g.node[id^=step-]")
        assert steps.count() == len(applied)
        drawn = _texts(page.locator("#path svg"))
        for n, entry in enumerate(applied, 1):
            assert _texts(page.locator(f"#path g#step-{n}")).strip() == entry.to_state
            assert f"{n}. {entry.event}" in drawn
            assert f"fence {entry.fence} · attempt {entry.attempt}" in drawn
        # the path alone: no state it never entered is drawn
        assert "investigate" not in drawn
        assert "cancelling" not in drawn
        assert page.locator("#machine-diagram").count() == 0
        screenshot(page, "job-path", tmp_path)
        # the whole lifecycle behind it, on demand
        page.click("#machine-show")
        page.wait_for_selector("#machine-diagram[data-pan-zoom=ready]")
        whole = _texts(page.locator("#machine-diagram svg"))
        assert "investigate" in whole
        assert "cancelling" in whole
        page.click("#machine-hide")
        page.wait_for_selector("#path[data-pan-zoom=ready]")
        assert page.locator("#machine-diagram").count() == 0
        assert "by carol" in drawn  # the operator's step names them
        assert not [m for m in messages if "Content Security Policy" in m], messages
