"""The latency suite and the alternated pairs: their arithmetic and bookkeeping, never a timing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from benchmarks import latency, pairs, stamps
from benchmarks.goals import LATENCY_BOUNDS, PAIR_BOUNDS, Bound, latency_key
from benchmarks.harness import Config, Measurement
from benchmarks.latency_systems import Submit
from benchmarks.report import Report
from tests.unit.test_bench_report import MACHINE


def m(key: str, *values: float, unit: str = "ms") -> Measurement:
    return Measurement(key, key, unit, list(values))


def test_percentiles_are_nearest_rank_and_reported_in_milliseconds() -> None:
    values = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert latency.percentile(values, 50) == 0.050
    assert latency.percentile(values, 99) == 0.099
    assert latency.percentile([0.003], 99) == 0.003
    got = latency.summary([0.004, 0.001, 0.002])
    assert got == pytest.approx({"p50": 2.0, "p99": 4.0, "max": 4.0})


def test_stamps_append_whole_lines_from_threads_and_read_keeps_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "stamps"
    monkeypatch.setenv(stamps.STAMPS_ENV, str(path))
    threads = [
        threading.Thread(target=lambda k=k: [stamps.stamp(k * 100 + i) for i in range(100)])
        for k in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stamps.stamp(7)  # job 7 started again: its first start counts
    got = stamps.read(path)
    assert sorted(got) == list(range(400))
    lines = path.read_text().splitlines()
    assert len(lines) == 401
    first_seven = next(float(line.split()[1]) for line in lines if line.split()[0] == "7")
    assert got[7] == first_seven
    assert stamps.read(tmp_path / "none") == {}


def test_offer_submits_every_job_once_on_its_schedule_and_records_the_chosen_moment() -> None:
    # given a client that records when each job number was submitted
    seen: list[tuple[int, float]] = []
    lock = threading.Lock()

    def client() -> Submit:
        def submit(n: int) -> None:
            with lock:
                seen.append((n, time.monotonic()))

        return submit

    began = time.monotonic()
    # when 40 jobs are offered at 400 jobs/s by 4 threads, numbered from 10
    done = latency.offer(client, 10, 40, 400.0, 4)
    # then each job was submitted once, none before its due time, and every
    # recorded moment is its submit's return, after the call
    assert sorted(n for n, _ in seen) == list(range(10, 50))
    assert sorted(done) == list(range(10, 50))
    for n, at in seen:
        assert at >= began + latency.LEAD + (n - 10) / 400.0
        assert done[n] >= at
    # and from_call records the moment before the call instead
    seen.clear()
    called = latency.offer(client, 0, 5, 1000.0, 1, from_call=True)
    assert all(called[n] <= at for n, at in seen)


def test_a_failing_submit_fails_the_offer() -> None:
    def client() -> Submit:
        def submit(n: int) -> None:
            raise RuntimeError(f"no job {n}")

        return submit

    with pytest.raises(RuntimeError, match="no job 0"):
        latency.offer(client, 0, 3, 1000.0, 1)


def test_waiting_for_starts_names_the_jobs_that_never_started(tmp_path: Path) -> None:
    path = tmp_path / "stamps"
    path.write_text("1 5.0\n2 6.0\n")
    assert latency.wait_started(path, [1, 2], 1.0) == {1: 5.0, 2: 6.0}
    with pytest.raises(TimeoutError, match=r"1 of 3 jobs never started: \[3\]"):
        latency.wait_started(path, [1, 2, 3], 0.0)


def test_every_system_has_a_unique_key_and_says_how_it_was_measured() -> None:
    keys = [s.key for s in latency.SYSTEMS]
    assert len(set(keys)) == len(keys)
    peers = {"dramatiq", "celery", "procrastinate"}
    assert peers <= set(keys)
    for system in latency.SYSTEMS:
        if system.key in peers:
            assert "measured" in system.settings
            assert "setting" in system.settings
    # the goals name systems the suite runs
    for bound in LATENCY_BOUNDS:
        for key in (bound.key, *bound.among):
            assert key.split(".r100.")[0].removeprefix("latency.") in keys


def test_the_quick_plan_is_one_task_over_every_load(tmp_path: Path) -> None:
    cfg = Config.make(quick=True, tmp=tmp_path)
    (task,) = latency.plan(cfg)
    assert f"{len(latency.SYSTEMS)} systems x 3 loads" in task.label


def test_latency_goals_take_the_best_postgresql_path_and_compare_with_every_peer() -> None:
    rows = [
        m(latency_key("jobfsm.postgres.listen"), 12.0, 14.0, 30.0),
        m(latency_key("jobfsm.asyncio"), 8.0, 9.0, 11.0),
        m(latency_key("jobfsm.rabbitmq"), 11.0, 12.0, 13.0),
        m(latency_key("jobfsm.postgres.txn"), 6.0),
        m(latency_key("dramatiq"), 4.0, 5.0, 6.0),
        m(latency_key("celery"), 5.0, 6.0, 7.0),
        m(latency_key("procrastinate"), 15.0, 19.0, 20.0),
    ]
    got = {label: (shown, ok) for label, shown, _b, ok in Report(rows).verdicts()}
    shown, ok = got["latency p99 at 100 jobs/s: jobfsm's best PostgreSQL path"]
    assert ok is True
    assert shown == "9.00 ms (8.00-11.0 over 3 repeats) (`latency.jobfsm.asyncio.r100.p99`)"
    assert got["latency p99 at 100 jobs/s: jobfsm PostgreSQL + RabbitMQ"][1] is False
    assert got["latency p99 at 100 jobs/s: a submit in the caller's transaction, from its commit"][
        1
    ]
    # the best PostgreSQL path (9 ms) against the lowest peer (dramatiq, 5 ms), with the
    # spread of the per-repeat ratios (8/4, 9/5, 11/6)
    label = "latency p99 at 100 jobs/s: jobfsm's best PostgreSQL path / every peer's, the lowest"
    shown, ok = got[label]
    assert ok is False
    assert shown.startswith("1.80x (repeats 1.80-2.00x)")


def test_the_latency_section_has_a_row_per_system_and_load() -> None:
    rows = [
        Measurement(
            f"latency.jobfsm.rabbitmq.r{rate}.{stat}",
            f"jobfsm, PostgreSQL + RabbitMQ delivery: {stat}, {rate} jobs/s offered",
            "ms",
            [value],
            {"wake": "a message"},
            facts={"achieved jobs/s": [rate - 1.0]},
        )
        for rate in (10, 100)
        for stat, value in (("p50", 3.0), ("p99", 9.0), ("max", 12.0))
    ]
    text = Report(rows).markdown(MACHINE, "python -m benchmarks --suites latency")
    assert "### Latency, submit to start" in text
    assert "| jobfsm, PostgreSQL + RabbitMQ delivery | 100 | 99.0 | 3.00 | 9.00 |  | 12.0 |" in text
    assert "| jobfsm, PostgreSQL + RabbitMQ delivery | 10 | 9.00 | 3.00 | 9.00 |" in text


def test_a_bound_can_ask_for_at_least_its_value() -> None:
    at_least = Bound("ratio", "pairs.w1.rabbitmq_over_dramatiq", 1.5, "x", higher_is_better=True)
    assert Report([m(at_least.key, 1.4, 1.6, 1.7, unit="x")]).bound(at_least)[1:] == (
        "1.60 x (1.40-1.70 over 3 repeats)",
        ">= 1.50 x",
        True,
    )
    assert Report([m(at_least.key, 1.2, unit="x")]).bound(at_least)[3] is False
    assert Report([]).bound(at_least)[1] == "not measured"


def test_pair_rounds_rotate_the_order_and_each_round_gives_its_own_ratio(tmp_path: Path) -> None:
    cfg = Config.make(quick=True, tmp=tmp_path)
    ran: list[str] = []
    rate = {"rabbitmq": [900.0, 1000.0, 800.0], "dramatiq": [600.0, 500.0, 400.0],
            "postgres": [1000.0, 1000.0, 1000.0]}  # fmt: skip
    cpu = {"rabbitmq": 140.0, "dramatiq": 300.0, "postgres": 120.0}

    def fake(system: str, _cfg: Config, workers: int) -> tuple[float, float]:
        assert workers == 4
        ran.append(system)
        return rate[system][ran.count(system) - 1], cpu[system]

    got = pairs.rounds(cfg, 4, 3, fake)
    # each system goes first once
    assert [ran[0], ran[3], ran[6]] == ["rabbitmq", "dramatiq", "postgres"]
    by_key = {r.key: r for r in pairs.rows(4, got)}
    assert by_key["pairs.w4.rabbitmq_over_dramatiq"].values == [1.5, 2.0, 2.0]
    assert by_key["pairs.w4.rabbitmq_over_polling"].values == [0.9, 1.0, 0.8]
    assert by_key["pairs.w4.broker_machine_cpu"].values == [20.0, 20.0, 20.0]
    assert by_key["pairs.w4.dramatiq"].values == [600.0, 500.0, 400.0]
    # every pair goal names a figure the rows make
    assert {b.key for b in PAIR_BOUNDS if b.key.startswith("pairs.w4")} <= set(by_key)


def test_named_machine_cpu_leaves_out_the_rest_of_the_machine() -> None:
    meter = pairs.Meter()
    meter.per_job = {"worker processes": 50.0, "PostgreSQL server": 30.0, pairs.OTHER: 400.0}
    assert pairs.named_cpu(meter) == 80.0
