"""The benchmark report: ratios from the same run, honest gaps, verdicts, the docs splice."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.harness import Measurement, read_jsonl, write_jsonl
from benchmarks.machine import MACHINE_FACT
from benchmarks.report import BEGIN, END, Comparison, Report, splice


def m(key: str, *values: float, unit: str = "jobs/s", **facts: object) -> Measurement:
    return Measurement(key, key, unit, list(values), facts=dict(facts))


#: the machine facts a report's header needs
MACHINE = {
    "date": "d",
    "cores": 2,
    "cpu": "c",
    "memory_gib": 1,
    "load_average": [0],
    "python": "3",
    "kernel": "k",
    "sqlite": "s",
    "postgresql": "p",
    "rabbitmq": "r",
    "packages": {},
}

FOUR_WAY = Comparison(
    "pg / procrastinate",
    "throughput.jobfsm.postgres.w4.process",
    ("throughput.procrastinate.w4.process", "throughput.procrastinate.c4.process"),
    1.5,
)


def test_a_ratio_is_taken_against_the_best_peer_configuration_by_median() -> None:
    report = Report(
        [
            m("throughput.jobfsm.postgres.w4.process", 1500, 1600, 1700),
            m("throughput.procrastinate.w4.process", 900, 1000, 5000),  # median 1000
            m("throughput.procrastinate.c4.process", 800),
        ]
    )
    value, against = report.ratio(FOUR_WAY)
    assert value == 1.6
    assert against == "throughput.procrastinate.w4.process"


def test_a_missing_side_is_not_measured_rather_than_guessed() -> None:
    report = Report([m("throughput.jobfsm.postgres.w4.process", 1500)])
    value, against = report.ratio(FOUR_WAY)
    assert math.isnan(value)
    assert against == ""
    rows = {label: (shown, met) for label, shown, _bound, met in report.verdicts()}
    assert rows["jobfsm PostgreSQL, 4 workers / procrastinate, best swept shape"] == (
        "not measured",
        None,
    )
    assert rows["worker CPU per no-op job, PostgreSQL polling, 1 worker"] == ("not measured", None)


def test_recovery_verdicts_need_every_run_rerun_within_a_second() -> None:
    fast = m("recovery.jobfsm.sqlite.same_host", 0.4, 0.6, unit="s", never_rerun=0, lost=0)
    one_never = m("recovery.jobfsm.postgres.same_host", 0.4, unit="s", never_rerun=1, lost=0)
    slow = m("recovery.jobfsm.postgres.cross_host", 1.2, 1.4, unit="s", never_rerun=0, lost=1)
    zombie = m("recovery.jobfsm.sqlite.zombie", 0, 1, unit="effects")
    met = {
        label: ok
        for label, _shown, _bound, ok in Report([fast, one_never, slow, zombie]).verdicts()
    }
    assert met["recovery p50 after kill -9: recovery.jobfsm.sqlite.same_host"] is True
    assert met["recovery p50 after kill -9: recovery.jobfsm.postgres.same_host"] is False
    assert met["recovery p50 after kill -9: recovery.jobfsm.postgres.cross_host"] is False
    assert met["effects committed twice: recovery.jobfsm.sqlite.zombie"] is False
    assert met["jobs lost, every jobfsm recovery scenario"] is False


def test_results_round_trip_through_json_lines_and_render(tmp_path: Path) -> None:
    rows = [
        m("throughput.jobfsm.sqlite.w1.process", 2000, 2100),
        m("throughput.raw.sqlite.batched.process", 3000),
        m("recovery.celery.acks_early", unit="s", runs=1, rerun=0, never_rerun=1, lost=1),
        m("scale.sqlite.worker_memory", 40.0, 40.5, unit="MiB"),
    ]
    facts = {
        "date": "2026-11-30 23:00 UTC",
        "cores": 2,
        "cpu": "test",
        "memory_gib": 1.0,
        "load_average": [0.1, 0.2, 0.3],
        "python": "3.11",
        "kernel": "k",
        "sqlite": "3",
        "postgresql": "15",
        "rabbitmq": "3.10",
        "packages": {"jobfsm": "0.1.0"},
    }
    path = tmp_path / "r.jsonl"
    write_jsonl(path, facts, "python -m benchmarks", rows)
    facts2, command, rows2 = read_jsonl(path)
    assert (facts2, command, rows2) == (facts, "python -m benchmarks", rows)
    text = Report(rows2).markdown(facts2, command)
    batched = "jobfsm SQLite (FULL), 1 worker / raw sqlite3 (FULL) batched like a worker"
    assert f"| {batched} | 0.68x | >= 0.6x | yes |" in text
    assert "jobfsm writes an audit row for every transition" in text
    assert "| recovery.celery.acks_early | never | 0/1 |" in text
    assert "| scale.sqlite.worker_memory | 40.2 | 40.0-40.5 | MiB |" in text


def test_the_generated_block_is_replaced_and_the_hand_written_text_kept() -> None:
    doc = "# Benchmarks\n\nintro\n"
    once = splice(doc, "first\n")
    assert once == f"# Benchmarks\n\nintro\n\n{BEGIN}\nfirst\n{END}\n"
    twice = splice(once + "\n## After\n", "second\n")
    assert twice == f"# Benchmarks\n\nintro\n\n{BEGIN}\nsecond\n{END}\n## After\n"


def test_bounds_hold_a_figure_to_its_median_or_to_every_run() -> None:
    # given a CPU figure whose median is within 60 us and a place whose worst run is not
    cpu = m("throughput.jobfsm.postgres.w1.cpu", 50, 55, 90, unit="us/job")
    place = m("core.recovered_place", 1, 2, unit="batches")
    decide_cost = m("core.decide", 16.0, unit="us")
    met = {label: ok for label, _shown, _bound, ok in Report([cpu, place, decide_cost]).verdicts()}
    # then the median decides the CPU goal, the worst run the place goal
    assert met["worker CPU per no-op job, PostgreSQL polling, 1 worker"] is True
    assert met["a recovered job under a 2,500-job backlog: claim batches until leased"] is False
    assert met["`decide`, median of one call"] is False


def test_a_cpu_goal_shows_the_floor_the_same_run_measured_beside_it() -> None:
    # given the worker's CPU per job and its engine path alone in the same run
    cpu = m("throughput.jobfsm.postgres.w1.cpu", 100, 104, 110, unit="us/job")
    floor = m("throughput.engine.postgres.batched.cpu", 70, 72, 75, unit="us/job")
    got = {label: (shown, ok) for label, shown, _bound, ok in Report([cpu, floor]).verdicts()}
    shown, ok = got["worker CPU per no-op job, PostgreSQL polling, 1 worker"]
    # then the verdict is the worker's, with the floor's median beside it
    assert ok is False
    assert shown == (
        "104 us (100-110 over 3 repeats) (floor, throughput.engine.postgres.batched.cpu: 72.0 us)"
    )
    # and without the floor's row, the figure alone
    alone = {label: shown for label, shown, _b, _ok in Report([cpu]).verdicts()}
    assert alone["worker CPU per no-op job, PostgreSQL polling, 1 worker"] == (
        "104 us (100-110 over 3 repeats)"
    )


def test_recovery_p99_is_the_nearest_rank_so_one_slow_run_of_five_fails_it() -> None:
    slow = m("recovery.jobfsm.sqlite.same_host", 0.3, 0.4, 0.5, 0.6, 1.6, unit="s", never_rerun=0)
    rows = {label: (shown, ok) for label, shown, _bound, ok in Report([slow]).verdicts()}
    shown, ok = rows["recovery p99 after kill -9: recovery.jobfsm.sqlite.same_host"]
    assert (shown, ok) == ("1.60 s (of 5 runs)", False)
    assert rows["recovery p50 after kill -9: recovery.jobfsm.sqlite.same_host"][1] is True


def test_the_best_shape_of_a_sweep_is_picked_by_median_and_every_shape_is_kept() -> None:
    from benchmarks.peers import sweep

    runs = {(1, 1): [100.0, 110.0, 900.0], (4, 1): [300.0, 310.0, 320.0], (1, 4): [200.0]}
    shape, values, facts = sweep.best(runs, sweep.slots(list(runs), 4))
    assert shape == (4, 1)
    assert values == [300.0, 310.0, 320.0]
    assert facts == {"medians of the shapes tried (jobs/s)": {"4x1": 310, "1x4": 200}}
    assert sweep.processes(sweep.DRAMATIQ, 4) == [(4, 4), (4, 8), (4, 16), (4, 32)]
    assert set(sweep.slots(sweep.PROCRASTINATE_QUICK, 4)) == {(4, 1), (1, 4)}


def test_scale_goals_hold_10m_rows_against_the_empty_table_of_the_same_run() -> None:
    def verdicts(p99_10m: float, rate_10m: float, prune: float) -> dict[str, bool | None]:
        rows = [
            m("scale.postgres.rows0.lease_p99", 0.6, 0.7, 0.8, unit="ms"),
            m("scale.postgres.rows0.throughput", 5000, 6000, 7000),
            m("scale.postgres.rows10000000.lease_p99", p99_10m, unit="ms"),
            m("scale.postgres.rows10000000.throughput", rate_10m),
            m("scale.postgres.rows10000000.prune", prune),
        ]
        return {label: met for label, _s, _b, met in Report(rows).verdicts()}

    latency = "PostgreSQL lease p99, 10M finished rows / no finished rows"
    rate = "PostgreSQL no-op jobs/s, 1 worker, 10M finished rows / no finished rows"
    prune = "PostgreSQL prune of 9M of 10M finished rows, jobs/s removed / jobs/s 1 worker runs"
    good = verdicts(1.4, 4200, 60_000)  # 2.0x the p99, 0.7x the rate, 10x the rate
    assert (good[latency], good[rate], good[prune]) == (True, True, True)
    bad = verdicts(1.41, 4199, 59_999)  # lower is better for latency: above 2x fails
    assert (bad[latency], bad[rate], bad[prune]) == (False, False, False)
    missing = {label: met for label, _s, _b, met in Report([]).verdicts()}
    assert missing[latency] is None
    assert missing[prune] is None


def test_the_scale_section_prints_its_ratios() -> None:
    rows = [
        m("scale.postgres.rows0.lease_p99", 0.5, unit="ms"),
        m("scale.postgres.rows10000000.lease_p99_pruning", 1.5, unit="ms"),
    ]
    text = Report(rows).markdown(MACHINE, "python -m benchmarks")
    assert (
        "| PostgreSQL lease p99 while 9M rows are pruned / no finished rows | 3.00x "
        "| `scale.postgres.rows0.lease_p99` |"
    ) in text


def test_jobfsm_rows_are_its_best_threads_per_process_and_the_label_names_it() -> None:
    from benchmarks import throughput

    # given three thread counts tried with 1 process; 64 has the highest median rate
    runs = {
        32: [(3000.0, 140.0, [140.0]), (3100.0, 130.0, [130.0]), (9000.0, 120.0, [120.0])],
        64: [(4000.0, 110.0, [110.0]), (4100.0, 100.0, [100.0]), (3900.0, 105.0, [105.0])],
        128: [(3500.0, 90.0, [90.0]), (3600.0, 95.0, [95.0]), (3400.0, 99.0, [99.0])],
    }
    threads, (rate, cpu) = throughput.process_rows("postgres", 1, "w1", runs)
    # then the winner by median (not by its best run) is reported, named, with every median
    assert threads == 64
    assert rate.key == "throughput.jobfsm.postgres.w1.process"
    assert rate.values == [4000.0, 4100.0, 3900.0]
    assert rate.label == (
        "jobfsm, PostgreSQL store: process, 1 worker process, "
        "best threads per process of {1x32, 1x64, 1x128}: 64 threads"
    )
    assert rate.facts["medians of the shapes tried (jobs/s)"] == {
        "1x32": 3100,
        "1x64": 4000,
        "1x128": 3500,
    }
    assert rate.settings["threads per process"] == "64 (the best of [32, 64, 128], swept)"
    # and the worker CPU row is the winning shape's
    assert cpu.key == "throughput.jobfsm.postgres.w1.cpu"
    assert cpu.values == [110.0, 100.0, 105.0]
    assert cpu.label.startswith(rate.label)


def test_a_single_shape_keeps_the_plain_label_and_quick_runs_try_one_shape(
    tmp_path: Path,
) -> None:
    from benchmarks import throughput
    from benchmarks.harness import Config

    threads, (rate, _cpu) = throughput.process_rows(
        "sqlite", 4, "w4", {32: [(2000.0, 200.0, [50.0] * 4)]}
    )
    assert threads == 32
    assert rate.label == "jobfsm, SQLite store (synchronous=FULL): process, 4 worker processes"
    assert rate.settings["threads per process"] == 32
    quick = [t.label for t in throughput.plan(Config.make(quick=True, tmp=tmp_path))]
    full = [t.label for t in throughput.plan(Config.make(quick=False, tmp=tmp_path))]
    assert "jobfsm postgres: 1 worker(s) x {1x32} threads" in quick
    assert "jobfsm postgres: 1 worker(s) x {1x32, 1x64, 1x128, 1x256} threads" in full
    assert "jobfsm postgres: 1 worker(s) x {1x4} threads" in full  # equal slots, unswept


def test_the_batched_raw_baseline_claims_as_many_as_the_winning_threads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from benchmarks import engine_path, throughput
    from benchmarks.harness import Config
    from benchmarks.peers import raw_batched

    # given a 1-process sweep where 128 threads per process is fastest
    def rate(
        system: str, cfg: Config, workers: int, threads: int, *, meter: object = None
    ) -> throughput.Run:
        return (float(threads), 100.0, [100.0])

    claims: list[tuple[int, str]] = []

    def baseline(cfg: Config, claim: int, why: str) -> list[Measurement]:
        claims.append((claim, why))
        return [m("throughput.raw.postgres.batched.process", 1.0)]

    def path(store: str, system: str, cfg: Config, claim: int, why: str) -> list[Measurement]:
        claims.append((claim, f"engine path of {store}: {why}"))
        return [m(f"throughput.engine.{system}.batched.cpu", 90.0, unit="us/job")]

    monkeypatch.setattr(throughput, "process_rate", rate)
    monkeypatch.setitem(raw_batched.BASELINES, "postgres", baseline)
    monkeypatch.setattr(engine_path, "rows", path)
    cfg = Config.make(quick=False, tmp=tmp_path, repeats=1)
    rows = throughput.process_task("postgres", cfg, 1, (32, 64, 128), "w1")
    # then the raw baseline and the engine path alone run beside it in claims of 128,
    # and say why
    why = "128, the threads per process of the 1-worker row's best shape"
    assert claims == [(128, why), (128, f"engine path of postgres: {why}")]
    assert [r.key for r in rows][-2:] == [
        "throughput.raw.postgres.batched.process",
        "throughput.engine.postgres.batched.cpu",
    ]
    # and the 4-process rows and RabbitMQ (no batched baseline) run neither
    throughput.process_task("postgres", cfg, 4, (32, 64), "w4")
    throughput.process_task("rabbitmq", cfg, 1, (32, 64), "w1")
    assert len(claims) == 2


def test_the_machine_cpu_table_lists_each_metered_row_part_by_part() -> None:
    parts = {"worker processes": 150.0, "PostgreSQL server": 93.4, "all": 299.0}
    fact = {MACHINE_FACT: {**parts, "cores busy": "94%"}}
    metered = m("throughput.jobfsm.rabbitmq.w4.process", 6000, **fact)
    plain = m("throughput.raw.postgres.batched.process", 6300)
    text = Report([metered, plain]).markdown(MACHINE, "python -m benchmarks")
    header = "| figure | worker processes | PostgreSQL server | all | cores busy |"
    assert header in text
    assert "| throughput.jobfsm.rabbitmq.w4.process | 150 | 93.4 | 299 | 94% |" in text
    table = text[text.index(header) :].split("\n\n")[0]
    assert "throughput.raw.postgres.batched.process" not in table  # nothing measured: no row


@pytest.mark.peers
def test_a_peer_row_label_names_only_the_shapes_it_picked_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from benchmarks.harness import Config
    from benchmarks.peers import celery_bench, dramatiq_bench, measure, sweep

    # given sweeps whose every shape drains at processes x threads jobs/s (no real peer)
    def runs(cfg: Config, a: int, b: int, **_: object) -> tuple[list[float], ...]:
        return [float(a * b)], [float(a * b)], [100.0], []

    monkeypatch.setattr(dramatiq_bench, "process_runs", runs)
    monkeypatch.setattr(celery_bench, "process_runs", runs)
    cfg = Config.make(quick=False, tmp=tmp_path, repeats=1)
    labels = {r.key: r.label for r in measure.dramatiq_sweep(cfg) + measure.celery_sweep(cfg)}
    # then each row's label lists the shapes that row chose among, and no other
    one = sweep.names(sweep.processes(sweep.DRAMATIQ, 1))
    four = sweep.names(sweep.processes(sweep.DRAMATIQ, 4))
    assert labels["throughput.dramatiq.w1.process"] == (
        f"dramatiq, best 1-process shape of {one}: 1 process(es) x 32 threads"
    )
    assert labels["throughput.dramatiq.w4.process"] == (
        f"dramatiq, best 4-process shape of {four}: 4 process(es) x 32 threads"
    )
    assert labels["throughput.celery.w4.process"] == (
        "celery, best 4-slot shape of {1x4, 2x2, 4x1}: 1 worker(s) x prefork concurrency 4"
    )
