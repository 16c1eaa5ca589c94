"""Every Python block of README.md and docs/*.md runs.

Blocks are found and run by pytest-examples (`find_examples`, `EvalExample.run`): it
reads fenced blocks with their line numbers and runs each as a module, reporting a
failure at the block's own line in the Markdown file. A page's blocks run in order,
each in the names the blocks above it left, as a reader types them into one session.

A block that cannot run standalone says so where every reader sees it: its first line
is `# sketch: REASON`. Those are counted here (SKETCHES), so a new one is a deliberate
change of this file, never a silent skip.

Blocks read their store URL from the DATABASE_URL environment variable, as a service
does: a SQLite file in the test's directory, or a fresh PostgreSQL database on the pages
whose blocks need PostgreSQL (PG_PAGES, marked postgres).

A block that serves with `worker.run()` (which serves until SIGTERM) is run as written:
here `Worker.run` serves for SERVE_FOR seconds and is then stopped as `worker.stop()`
stops it (a drain). What a block changes in the process's garbage collector (the
embedding page's `tune_collector()`) is undone after the page.

The blocks of the Django page (DJANGO_PAGES) run in a Django project, `shop`
(tests/docs/django_shop: an `Order` model, jobfsm on a SQLite file), migrated as
`manage.py migrate` does, in a pytest process of their own: Django is set up once per
process, and this one may already hold another test's project. They are given the
`Order` model and a `total`, which the page's first Django block speaks of.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

from fsm import Worker

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKETCH = re.compile(r"\A\s*# sketch: (?P<reason>\S.{9,})$", re.M)
#: pages whose blocks need PostgreSQL (a fresh database each run)
PG_PAGES = {"transactional-submit.md"}
#: pages whose blocks run in the Django project `shop`, in a process of their own
DJANGO_PAGES = {"django.md"}
SHOP = Path(__file__).resolve().parent / "django_shop"
#: set in the environment of that process
IN_SHOP = "JOBFSM_DOCS_IN_SHOP"
#: the blocks that say why they are not run, per page: change it with the docs
SKETCHES = {
    "rabbitmq.md": 2,
}
#: seconds a block's `worker.run()` serves before it is stopped
SERVE_FOR = 1.0


@pytest.fixture
def serving_briefly(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`Worker.run` serves SERVE_FOR seconds, then stops as `worker.stop()` stops it; the
    garbage collector's thresholds and frozen objects are as they were after."""
    run = Worker.run

    def brief(self: Worker) -> None:
        stopper = threading.Timer(SERVE_FOR, self.stop)
        stopper.start()
        try:
            run(self)
        finally:
            stopper.cancel()

    monkeypatch.setattr(Worker, "run", brief)
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def python_blocks(page: Path) -> list[CodeExample]:
    return [ex for ex in find_examples(page) if ex.prefix.split()[0] in ("py", "python")]


def sketch_reason(example: CodeExample) -> str | None:
    first = example.source.lstrip("\n").splitlines()[0]
    match = SKETCH.match(first)
    return None if match is None else match["reason"]


def page_params() -> list[pytest.ParameterSet]:
    params = []
    for page in PAGES:
        if not python_blocks(page):
            continue
        marks = [pytest.mark.postgres] if page.name in PG_PAGES else []
        params.append(pytest.param(page, id=page.name, marks=marks))
    return params


@pytest.mark.usefixtures("serving_briefly")
@pytest.mark.parametrize("page", page_params())
def test_the_python_blocks_of_a_page_run_in_order(
    page: Path,
    eval_example: EvalExample,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if page.name in DJANGO_PAGES and not os.environ.get(IN_SHOP):
        _in_a_process_of_its_own(page)
        return
    if page.name in PG_PAGES:
        url = request.getfixturevalue("pg_url")
    else:
        url = f"sqlite:///{tmp_path / 'app.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.chdir(tmp_path)
    names: dict[str, object] = {}
    if page.name in DJANGO_PAGES:
        names = _shop(tmp_path, monkeypatch)
    ran = 0
    for example in python_blocks(page):
        if sketch_reason(example) is not None:
            continue
        names = {**names, **eval_example.run(example, module_globals=names)}
        ran += 1
    if page.name in DJANGO_PAGES:  # the order and its job, committed together
        from fsm.contrib.django import close_engine, get_engine

        assert sum(get_engine().counts().values()) == 1
        assert names["Order"].objects.filter(pk=names["order"].pk).exists()
        close_engine()

    assert ran > 0 or SKETCHES.get(page.name), f"{page.name}: no block ran"


def _in_a_process_of_its_own(page: Path) -> None:
    """This test for `page`, in a pytest process that sets up the project `shop`."""
    test = f"{Path(__file__).relative_to(ROOT)}::test_the_python_blocks_of_a_page_run_in_order"
    args = ["-q", "-p", "no:cacheprovider", "-n", "0", f"{test}[{page.name}]"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=ROOT,
        env={**os.environ, IN_SHOP: "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def _shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Django set up on the project `shop`, its database migrated (jobfsm's tables
    with it); the names the page's blocks take as given."""
    import django
    from django.core.management import call_command

    monkeypatch.syspath_prepend(str(SHOP))
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "shopsite.settings")
    monkeypatch.setenv("SHOP_DB", str(tmp_path / "shop.db"))
    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)
    from shop.models import Order

    return {"Order": Order, "total": 100}


def test_every_block_runs_or_says_why_and_the_sketches_are_counted() -> None:
    total, sketches = 0, Counter[str]()
    for page in PAGES:
        for example in python_blocks(page):
            total += 1
            first = example.source.lstrip("\n").splitlines()[0]
            if first.lstrip().startswith("# sketch"):
                reason = sketch_reason(example)
                assert reason, f"{page.name}:{example.start_line}: a sketch names its reason"
                sketches[page.name] += 1

    assert dict(sketches) == SKETCHES, "a block stopped running or started to: update SKETCHES"
    ran = total - sum(sketches.values())
    assert ran >= 20, f"only {ran} of {total} blocks run"


def test_a_failing_block_fails_the_page(
    eval_example: EvalExample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\nfrom fsm import Engine\nEngine(store)\n```\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    [example] = python_blocks(page)

    with pytest.raises(NameError, match="store"):
        eval_example.run(example)


def test_a_sketch_without_a_reason_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\n# sketch:\nworker.run()\n```\n", encoding="utf-8")
    [example] = python_blocks(page)

    assert sketch_reason(example) is None
