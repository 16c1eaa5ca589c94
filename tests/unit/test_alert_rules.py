"""The alerting rules shipped in the package: valid for Prometheus (`promtool check
rules`), firing when they should and not before (`promtool test rules`, with series in
tests/unit/alerts/alerts_test.yml), and written with the metric and label names jobfsm
really exports."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fsm.telemetry.alerts import rules_path, rules_text
from fsm.telemetry.prometheus import PrometheusMetrics
from tests.conftest import need_program

HERE = Path(__file__).parent / "alerts"
#: metrics the rules use that jobfsm does not export: Prometheus's own
PROMETHEUS_OWN = {"up"}


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The installed rules file next to the promtool tests."""
    need_program("promtool", "apt-get install prometheus")
    (tmp_path / "alerts.yml").write_text(rules_text(), encoding="utf-8")
    shutil.copy(HERE / "alerts_test.yml", tmp_path / "alerts_test.yml")
    return tmp_path


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )


def test_promtool_accepts_the_shipped_rules(rules_dir: Path) -> None:
    done = promtool("check", "rules", "alerts.yml", cwd=rules_dir)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout


def test_each_rule_fires_on_its_series_and_not_before(rules_dir: Path) -> None:
    done = promtool("test", "rules", "alerts_test.yml", cwd=rules_dir)

    assert done.returncode == 0, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", (HERE / "alerts_test.yml").read_text()))
    shipped = set(re.findall(r"- alert: (\w+)", rules_text()))
    assert tested == shipped  # every shipped alert has a test


def exported() -> dict[str, set[str]]:
    """Metric name -> label names, as jobfsm's Prometheus exporter writes them."""
    from prometheus_client import generate_latest

    metrics = PrometheusMetrics()
    metrics.watch_store(lambda: {("default", "queued"): 1})
    metrics.transition("k", "lease", None, "leased")
    metrics.transition_code("k", "expire", "investigate", "unsafe_lost")
    metrics.attempt_seconds("k", "succeeded", 0.1)
    metrics.lease_renewals(1, 1)
    metrics.lease_lost("k")
    metrics.recovery("dead", "queued")
    metrics.rejected_report("k", "succeed")
    metrics.delivery_recovery("rabbitmq", "reconnect")
    metrics.queue_wait("default", 0.5)
    names: dict[str, set[str]] = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line and not line.startswith("#"):
            found = re.match(r"(\w+)(?:\{(.*)\})?", line)
            assert found is not None
            labels = set(re.findall(r"(\w+)=", found.group(2) or ""))
            names.setdefault(found.group(1), set()).update(labels)
    return names


def test_the_rules_use_only_metrics_and_labels_jobfsm_exports() -> None:
    metrics = exported()
    text = rules_text()
    for selector in re.findall(r"\b([a-z_]+)\{([^}]*)\}", text):
        name, matchers = selector
        if name in PROMETHEUS_OWN or name in ("by", "without", "on"):
            continue
        assert name in metrics, f"{name} is not exported"
        for label in re.findall(r"(\w+)=", matchers):
            assert label in metrics[name] | {"job", "instance"}, (name, label)
    used = set(re.findall(r"\bjobfsm_\w+", text)) - {"jobfsm_worker"}
    # a histogram is named in prose by its family name, exported as NAME_bucket, ...
    families = {n.removesuffix("_bucket") for n in metrics if n.endswith("_bucket")}
    assert used <= set(metrics) | families, used - set(metrics) - families
    for grouping in re.findall(r"(?:by|without) \(([^)]*)\)", text):
        labels = {g.strip() for g in grouping.split(",")}
        every = set().union(*metrics.values()) | {"job", "instance", "pod"}
        assert labels <= every, labels - every


def test_the_rules_file_ships_in_the_package_and_prints_with_python_m() -> None:
    assert rules_path().is_file()
    done = subprocess.run(
        [sys.executable, "-m", "fsm.telemetry.alerts"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout == rules_text()
    assert done.stdout.startswith("# jobfsm alerting rules for Prometheus")
