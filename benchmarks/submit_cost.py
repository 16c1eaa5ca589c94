"""What submitting costs the process that submits, with and without RabbitMQ wake-ups.

    python -m benchmarks.submit_cost --jobs 20000 --repeats 3

The service that embeds jobfsm pays for every `submit_many` in its own process: the
core's submit decisions, the store's insert, and with RabbitMQ the wake-ups, which
the outbox's sender threads publish in the background while the service goes on.
This submits `--jobs` no-op jobs to a fresh PostgreSQL store in batches of 1,000,
alternately

- without a publisher (the baseline: store polling needs nothing more), and
- with `RabbitDelivery` as the engine's publisher (its default asynchronous outbox;
  the run waits for `flush` before the clock stops, so every wake-up is durable at
  the broker),

and prints for each the rate, this process's CPU per job (user and system, from
`getrusage`: the sender threads included) and its voluntary context switches per job,
then the ratios of the second to the first. No worker runs: the store and the broker
only receive. A context switch per job is the sign of threads handing the interpreter
lock to each other job by job (see docs/benchmarks.md, "What submitting costs").
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import uuid
from typing import NamedTuple

from benchmarks.broker import delete_jobfsm_names
from benchmarks.harness import AMQP_URL
from benchmarks.noop import BATCH
from benchmarks.services import fresh_store_url
from fsm import Engine, open_store

MODES = ("no publisher", "RabbitMQ wake-ups")


class Cost(NamedTuple):
    jobs_per_s: float
    user_us: float  # per job
    system_us: float  # per job
    switches: float  # voluntary context switches per job

    @property
    def cpu_us(self) -> float:
        return self.user_us + self.system_us


def submit(jobs: int, publish: bool) -> Cost:
    """Submit `jobs` no-op jobs to a fresh PostgreSQL store, publishing wake-ups or not."""
    queue = f"submit-{uuid.uuid4().hex[:8]}"
    with fresh_store_url("postgres") as url:
        engine = Engine(open_store(url))
        delivery = None
        if publish:
            from adapters.rabbitmq import RabbitDelivery

            delivery = RabbitDelivery(AMQP_URL, engine=engine)
            engine.publisher = delivery
        try:
            # warm: connections, prepared statements, the outbox's senders
            engine.submit_many([("noop", None, {"queue": queue})] * 100)
            if delivery is not None and not delivery.flush(60.0):
                raise RuntimeError("warm-up wake-ups not confirmed within 60 s")
            before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            for start in range(0, jobs, BATCH):
                engine.submit_many([("noop", None, {"queue": queue})] * min(BATCH, jobs - start))
            if delivery is not None and not delivery.flush(120.0):
                raise RuntimeError("wake-ups not confirmed within 120 s")
            elapsed = time.perf_counter() - began
            after = resource.getrusage(resource.RUSAGE_SELF)
            if delivery is not None and delivery.outbox.dropped + delivery.outbox.failed:
                raise RuntimeError(
                    f"{delivery.outbox.dropped} wake-ups dropped and "
                    f"{delivery.outbox.failed} failed: the figure would not be of them all"
                )
        finally:
            if delivery is not None:
                delivery.close()
                delete_jobfsm_names([f"jobfsm.{queue}"], keep_dead_letter=True)
            engine.store.close()
    per_job = 1e6 / jobs
    return Cost(
        jobs / elapsed,
        (after.ru_utime - before.ru_utime) * per_job,
        (after.ru_stime - before.ru_stime) * per_job,
        (after.ru_nvcsw - before.ru_nvcsw) / jobs,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.submit_cost",
        description="What submit_many costs the submitting process, with and without "
        "RabbitMQ wake-ups (PostgreSQL store, batches of 1,000).",
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run [20000]")
    parser.add_argument("--repeats", type=int, default=3, help="alternated runs of each [3]")
    args = parser.parse_args()
    runs: dict[str, list[Cost]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            cost = submit(args.jobs, publish=mode != MODES[0])
            runs[mode].append(cost)
            print(f"{mode:>18}: {cost.jobs_per_s:8,.0f} jobs/s, CPU {cost.cpu_us:5.1f} us/job "
                  f"(user {cost.user_us:.1f}, system {cost.system_us:.1f}), "
                  f"{cost.switches:.2f} voluntary context switches per job")  # fmt: skip
    median = {m: Cost(*(statistics.median(c[i] for c in runs[m]) for i in range(4))) for m in MODES}
    base, wake = median[MODES[0]], median[MODES[1]]
    print(f"medians of {args.repeats}, {args.jobs:,} jobs each: with wake-ups "
          f"{wake.jobs_per_s / base.jobs_per_s:.2f}x the rate and "
          f"{wake.cpu_us / base.cpu_us:.2f}x the CPU per job of no publisher "
          f"({wake.cpu_us:.1f} against {base.cpu_us:.1f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
