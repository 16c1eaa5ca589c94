"""RabbitMQ delivery benchmark: no-op jobs through the broker, against dramatiq and raw pika.

    python benchmarks/rabbitmq.py [--jobs 2000] [--runs 3] [--threads 8] [--store postgres]

Three pipelines on the same broker, in the same run, each end to end (the clock
starts before the first message is produced and stops when the last job is done):

- raw pika: publish with confirms (persistent, one confirm per message) and a
  consumer acking each message; no work, no store. The physical limit, with one
  publishing connection (as dramatiq's `send`) and with four (as jobfsm's outbox,
  `publisher_threads=4`).
- dramatiq: `actor.send()` per job (RabbitmqBroker with publisher confirms, as
  jobfsm always has them) and a dramatiq Worker with `--threads` threads.
- jobfsm: `engine.submit()` per job (a store transaction, then a confirmed
  publish) and a jobfsm Worker with `--threads` thread slots, woken through
  RabbitDelivery: consume -> lease by id -> ack -> start -> run -> succeed. A
  second line submits in batches of 100 (`submit_many`).

dramatiq keeps no state: a job it loses is gone. jobfsm writes every job and every
transition to the store (PostgreSQL by default) with an audit trail; that is the
price the ratio shows. Needs the `bench` extra (`pip install -e '.[bench]'`, not part of `dev`).
The machine has 2 cores and other work runs beside it: figures move between runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from adapters.rabbitmq import RabbitDelivery  # noqa: E402
from benchmarks import broker  # noqa: E402
from benchmarks.harness import AMQP_URL, wait_for  # noqa: E402
from benchmarks.peers.raw_pika import end_to_end  # noqa: E402
from benchmarks.services import fresh_store_url  # noqa: E402
from fsm import Engine, open_store  # noqa: E402
from fsm.service.identity import Identity  # noqa: E402
from fsm.worker import Worker  # noqa: E402

WAIT_LIMIT = 600.0  # seconds one pipeline may take before the benchmark gives up


# --- raw pika ---------------------------------------------------------------------------


def run_raw(jobs: int, prefetch: int, publishers: int = 1) -> float:
    """Raw pika end to end, confirmed publishes and an acking consumer (peers/raw_pika.py)."""
    return end_to_end(jobs, prefetch, publishers, limit=WAIT_LIMIT)


# --- dramatiq ---------------------------------------------------------------------------


def run_dramatiq(jobs: int, threads: int) -> float:
    import dramatiq
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    queue = f"bench_dramatiq_{uuid.uuid4().hex[:8]}"
    client = RabbitmqBroker(url=AMQP_URL, confirm_delivery=True)
    dramatiq.set_broker(client)
    lock = threading.Lock()
    done = 0

    def noop() -> None:
        nonlocal done
        with lock:
            done += 1

    actor = dramatiq.actor(noop, queue_name=queue, broker=client, actor_name=queue)
    client.declare_queue(queue)
    worker = dramatiq.Worker(client, worker_threads=threads, worker_timeout=100)
    worker.start()
    try:
        started = time.perf_counter()
        for _ in range(jobs):
            actor.send()
        wait_for(lambda: done >= jobs, WAIT_LIMIT, "dramatiq", step=0.005)
        elapsed = time.perf_counter() - started
    finally:
        worker.stop()
        client.close()
        broker.delete([queue, f"{queue}.DQ", f"{queue}.XQ"])
    return jobs / elapsed


# --- jobfsm -----------------------------------------------------------------------------


def run_jobfsm(jobs: int, threads: int, store: str, batch: int) -> float:
    prefix = f"bench.jobfsm.{uuid.uuid4().hex[:8]}."
    with fresh_store_url(store) as url:
        engine = Engine(open_store(url))
        delivery = RabbitDelivery(AMQP_URL, engine=engine, prefix=prefix)
        engine.publisher = delivery
        worker = Worker(
            engine,
            {"noop": lambda ctx: None},
            delivery=delivery,
            concurrency=threads,
            install_signals=False,
            identity=Identity(),
        )
        runner = threading.Thread(target=worker.run)
        runner.start()
        worker.wait_started(30)

        def finished() -> bool:
            return sum(n for (_q, s), n in engine.counts().items() if s == "succeeded") >= jobs

        try:
            started = time.perf_counter()
            if batch <= 1:
                for _ in range(jobs):
                    engine.submit("noop")
            else:
                for i in range(0, jobs, batch):
                    engine.submit_many([("noop", None, {})] * min(batch, jobs - i))
            wait_for(finished, WAIT_LIMIT, "jobfsm", step=0.005)
            elapsed = time.perf_counter() - started
        finally:
            worker.stop()
            runner.join(60)
            engine.store.close()
            broker.delete([f"{prefix}default", f"{prefix}dead-letter"], [f"{prefix}dead-letter"])
    return jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    pipelines: dict[str, Callable[[], float]] = {
        "raw pika (confirm + ack)": lambda: run_raw(args.jobs, args.threads * 2),
        "raw pika, 4 publishing connections": lambda: run_raw(args.jobs, args.threads * 2, 4),
        "dramatiq": lambda: run_dramatiq(args.jobs, args.threads),
        f"jobfsm ({args.store}, submit)": lambda: run_jobfsm(
            args.jobs, args.threads, args.store, 1
        ),
        f"jobfsm ({args.store}, submit_many 100)": lambda: run_jobfsm(
            args.jobs, args.threads, args.store, 100
        ),
    }
    for run in range(args.runs):
        for name, pipeline in pipelines.items():  # interleaved: load hits all alike
            rate = pipeline()
            results.setdefault(name, []).append(rate)
            print(f"run {run + 1}: {name}: {rate:,.0f} jobs/s", file=sys.stderr, flush=True)
    medians = {name: statistics.median(rates) for name, rates in results.items()}
    raw, dram = medians["raw pika (confirm + ack)"], medians["dramatiq"]
    print(f"\n{args.jobs} no-op jobs, {args.threads} threads, median of {args.runs} runs")
    print(f"{'pipeline':42} {'jobs/s':>9} {'vs dramatiq':>12} {'vs raw':>8}")
    for name, rate in medians.items():
        print(f"{name:42} {rate:9,.0f} {rate / dram:11.2f}x {rate / raw:7.2f}x")


if __name__ == "__main__":
    main()
