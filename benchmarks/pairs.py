"""The broker path against dramatiq's best and against polling, in alternated pairs.

    python -m benchmarks --suites pairs          # 1 and 4 worker processes, 3 rounds each

dramatiq's rows move by 40% within one run, so two medians taken minutes apart make a
fragile ratio. Here one task runs, for 1 and then 4 worker processes, `ROUNDS`
rounds of three drains back to back: jobfsm PostgreSQL + RabbitMQ, dramatiq, jobfsm
PostgreSQL polling (the order rotated each round, so no system always goes first).
Each round gives its own ratios; the goals are on their median, and every round's
ratio is kept. Each drain is `throughput.process_rate` or
`dramatiq_bench.process_rate`: fresh store and queue, workers warm, `cfg.jobs`
no-op jobs.

Shapes: jobfsm runs `JOBFSM_THREADS` threads per process, the throughput suite's
best shape on this machine for both stores and both process counts; dramatiq runs
`DRAMATIQ_THREADS`, the best of its sweep ({1, 2, 4} processes x {4, 8, 16, 32}
threads) in the full runs so far. The peers suite's sweep in the same run is the
check on that choice: its best shape is in its row's label.

The machine CPU the broker adds per job is the broker round's machine CPU per job
minus the polling round's, both without the "rest of the machine" part (other
sessions' load and the kernel's unnamed time): worker processes, PostgreSQL, RabbitMQ
and the submitting benchmark process.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from benchmarks import throughput
from benchmarks.harness import Config, Measurement, Task
from benchmarks.machine import OTHER, Meter

ROUNDS = 3
JOBFSM_THREADS = 256
DRAMATIQ_THREADS = {1: 32, 4: 8}
SYSTEMS = ("rabbitmq", "dramatiq", "postgres")


def named_cpu(meter: Meter) -> float:
    """Machine CPU per job of the named parts (all but the rest of the machine), us."""
    return sum(v for k, v in meter.per_job.items() if k != OTHER)


def order(round_: int) -> list[str]:
    """The systems of round `round_`, rotated so each goes first once in three."""
    k = round_ % len(SYSTEMS)
    return [*SYSTEMS[k:], *SYSTEMS[:k]]


def drain(system: str, cfg: Config, workers: int) -> tuple[float, float]:
    """(jobs/s, named machine CPU per job in us) of one drain of `system`."""
    meter = Meter()
    if system == "dramatiq":
        # imported here: dramatiq comes from the bench extra, which this module's
        # arithmetic (rounds, rows) does not need
        from benchmarks.peers import dramatiq_bench

        rate = dramatiq_bench.process_rate(
            cfg.jobs, workers, cfg.tmp, DRAMATIQ_THREADS[workers], meter=meter
        )[0]
    else:
        rate = throughput.process_rate(system, cfg, workers, JOBFSM_THREADS, meter=meter)[0]
    return rate, named_cpu(meter)


Drain = Callable[[str, Config, int], tuple[float, float]]


Rounds = list[dict[str, tuple[float, float]]]


def rounds(cfg: Config, workers: int, runs: int, run: Drain = drain) -> Rounds:
    """`runs` rounds; each maps a system to its (jobs/s, named machine CPU per job)."""
    return [{s: run(s, cfg, workers) for s in order(r)} for r in range(runs)]


def rows(workers: int, got: Rounds) -> list[Measurement]:
    """The rates, the per-round ratios and the broker's added machine CPU."""
    key = f"pairs.w{workers}"
    procs = f"{workers} worker process{'es' if workers > 1 else ''}"
    settings = {
        "rounds": len(got),
        "order": "rotated each round: " + " / ".join(",".join(order(r)) for r in range(len(got))),
        "jobfsm threads per process": JOBFSM_THREADS,
        "dramatiq threads per process": DRAMATIQ_THREADS[workers],
        "dramatiq": "defaults (no publisher confirms)",
    }

    def each(system: str, i: int) -> list[float]:
        return [r[system][i] for r in got]

    def m(name: str, label: str, unit: str, values: list[float]) -> Measurement:
        return Measurement(f"{key}.{name}", f"{label}, {procs}", unit, values, settings)

    ratio = [r["rabbitmq"][0] / r["dramatiq"][0] for r in got]
    polling = [r["rabbitmq"][0] / r["postgres"][0] for r in got]
    added = [r["rabbitmq"][1] - r["postgres"][1] for r in got]
    out = [
        m("rabbitmq", "jobfsm PostgreSQL + RabbitMQ", "jobs/s", each("rabbitmq", 0)),
        m("dramatiq", "dramatiq", "jobs/s", each("dramatiq", 0)),
        m("postgres", "jobfsm PostgreSQL polling", "jobs/s", each("postgres", 0)),
        m("rabbitmq_over_dramatiq", "broker path / dramatiq, each round", "x", ratio),
        m("rabbitmq_over_polling", "broker path / polling, each round", "x", polling),
        m("broker_machine_cpu", "machine CPU the broker adds per job, each round", "us", added),
    ]
    for system in SYSTEMS:
        out[SYSTEMS.index(system)].facts["named machine CPU per job, us"] = [
            round(v, 1) for v in each(system, 1)
        ]
    out[3].facts["median"] = round(statistics.median(ratio), 3)
    return out


def plan(cfg: Config) -> list[Task]:
    runs = 1 if cfg.quick else ROUNDS
    return [
        Task(
            f"pairs: broker / dramatiq / polling, {w} worker process(es) x {runs} rounds",
            lambda w=w: rows(w, rounds(cfg, w, runs)),  # type: ignore[misc]
        )
        for w in (1, 4)
    ]
