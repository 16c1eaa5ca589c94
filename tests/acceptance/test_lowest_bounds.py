"""The lower bounds in pyproject.toml are true: jobfsm works with every dependency at its
lowest allowed version.

A fresh virtualenv gets each runtime dependency and each extra's (postgres, rabbitmq,
testing, web, metrics, tracing, pydantic) pinned to its lower bound, jobfsm itself without
dependencies, and then runs the CLI: submit, list, status, a worker run, the fault suite,
the psycopg API the LISTEN code needs, the dashboard's log-in page on the web floors
(raised past the web stack's advisories, see pyproject.toml), and a pydantic payload, the
Prometheus exposition and an attempt's span.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ._cli import ROOT

STEP_TIMEOUT = 240
_BOUND = re.compile(r"^([A-Za-z0-9_.-]+(?:\[[A-Za-z0-9_,-]+\])?)>=([0-9][0-9A-Za-z.]*)$")


def lowest_pins() -> list[str]:
    """`name[extras]==low` for the runtime dependencies and the postgres, rabbitmq, testing,
    web, metrics, tracing and pydantic extras (the dev, bench, examples and django sets are
    tools, examples and a framework a project brings, not what the code needs)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    specs = [*project["dependencies"], *extras["postgres"], *extras["rabbitmq"]]
    specs += [*extras["testing"], *extras["web"]]
    specs += [*extras["metrics"], *extras["tracing"], *extras["pydantic"]]
    pins = []
    for spec in specs:
        m = _BOUND.match(spec.replace(" ", ""))
        assert m, f"{spec!r}: every dependency needs a plain lower bound (name>=version)"
        pins.append(f"{m[1]}=={m[2]}")
    return pins


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False
    )
    assert done.returncode == 0, f"{cmd} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(4 * STEP_TIMEOUT)
def test_jobfsm_works_with_every_dependency_at_its_lower_bound(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.pop("JOBFSM_STORE", None)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    py = str(venv / "bin" / "python")
    jobfsm = str(venv / "bin" / "jobfsm")
    _run([py, "-m", "pip", "install", "-q", *lowest_pins()], tmp_path, env)
    _run([py, "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], tmp_path, env)
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "lowapp.py").write_text("handlers = {'k': lambda ctx: {'ok': True}}\n")

    _run([jobfsm, "submit", "k", "--payload", '{"n": 1}', "--store", store], tmp_path, env)
    worker = subprocess.Popen(
        [jobfsm, "worker", "--app", "lowapp", "--store", store, "--poll-interval", "0.1"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _run([py, "-c", _WAIT_SUCCEEDED, store], tmp_path, env)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    listed = _run([jobfsm, "list", "--store", store], tmp_path, env)
    status = _run([jobfsm, "status", "--store", store], tmp_path, env)
    faults = _run(
        # --quick: every fault model at its smoke size (--examples and --steps alone left
        # the policy model at its default size: 38 CPU seconds here, 9 with --quick)
        [jobfsm, "faults", "--store", "memory://", "--quick", "--examples", "3", "--steps", "5"],
        tmp_path,
        env,
    )
    notifies = _run(
        [
            py,
            "-c",
            "import inspect, psycopg; print(inspect.signature(psycopg.Connection.notifies))",
        ],
        tmp_path,
        env,
    )

    assert worker.returncode == 0
    assert "succeeded" in listed
    assert "succeeded" in status
    assert "ok: every invariant held" in faults
    assert "timeout" in notifies
    assert "stop_after" in notifies
    assert _run([py, "-c", _DASHBOARD_LOGIN_PAGE], tmp_path, env).split() == ["status", "200"]
    extras = _run([py, "-c", _EXTRAS_AT_THEIR_FLOORS], tmp_path, env).splitlines()
    assert extras == ["payload True", "refused True", "series True", "tracing True"]


_WAIT_SUCCEEDED = """
import sys, time
from fsm import Engine
from fsm.ports import ScanRequest
from fsm.registry import open_store
store = open_store(sys.argv[1])
until = time.monotonic() + 60
while not Engine(store).scan(ScanRequest(states=("succeeded",), limit=1)):
    assert time.monotonic() < until, "the job did not succeed within 60 s"
    time.sleep(0.1)
store.close()
"""

_DASHBOARD_LOGIN_PAGE = """
import asyncio
from fsm import Engine
from fsm.registry import open_store
from fsm.dashboard import create_app, new_token

app = create_app(Engine(open_store("memory://")), token=new_token())
sent = []

async def receive():
    return {"type": "http.request", "body": b"", "more_body": False}

async def send(message):
    sent.append(message)

scope = {
    "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
    "scheme": "http", "path": "/login", "raw_path": b"/login", "query_string": b"",
    "root_path": "", "headers": [(b"host", b"localhost")],
    "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
}
asyncio.run(app(scope, receive, send))
print("status", sent[0]["status"])
"""

_EXTRAS_AT_THEIR_FLOORS = """
import json

import pydantic

from fsm import BadInput, Engine, KindPolicy, open_store
from fsm.telemetry import tracing
from fsm.telemetry.prometheus import PrometheusMetrics


class Quote(pydantic.BaseModel):
    symbol: str


metrics = PrometheusMetrics()
kinds = {"quote": KindPolicy(payload_type=Quote)}
engine = Engine(open_store("memory://"), kinds=kinds, metrics=metrics)
metrics.watch_store(engine.counts)
parent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
job = engine.submit("quote", Quote(symbol="A"), correlation_id=parent)
print("payload", json.loads(job.payload_json) == {"symbol": "A"})
try:
    engine.submit("quote", {"sym": "B"})
except BadInput as err:
    print("refused", "symbol" in str(err))
body = metrics.render()[0].decode()
print("series", 'jobfsm_jobs{queue="default",state="queued"} 1.0' in body)
with tracing.attempt_span(job) as span:  # a no-op span without an SDK: the API's calls
    tracing.set_outcome(span, "failed", "postgresql://app:secret@db/app is down")
print("tracing", tracing.available())
"""
