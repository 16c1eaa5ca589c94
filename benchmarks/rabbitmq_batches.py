"""The RabbitMQ path against the store-polling path and dramatiq, in the same run.

    python -m benchmarks.rabbitmq_batches --rounds 3 --jobs 3000

Each round drains `--jobs` no-op jobs three ways, one after the other, with warm
workers: jobfsm with 1 worker process on PostgreSQL woken through RabbitMQ, the same
with store polling, and dramatiq with 1 process x 8 threads (`throughput.process_rate`
and `peers.dramatiq_bench.process_rate`, as the throughput suite runs them). It prints
each rate, the worker processes' CPU per job (user + system from /proc) and the two
ratios of the round. On a shared machine compare ratios of the same round, not rates
across rounds. To measure an older commit the same way, unpack it and put it first
on the path: `git archive <commit> | tar -x -C /tmp/base` and
`PYTHONPATH=/tmp/base python -m benchmarks.rabbitmq_batches` from /tmp/base.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile

from .harness import Config
from .peers import dramatiq_bench
from .throughput import process_rate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3000)
    args = parser.parse_args(argv)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="jobfsm-rabbitmq-batches-"))
    cfg = Config.make(quick=True, tmp=tmp, jobs=args.jobs)
    for n in range(1, args.rounds + 1):
        rabbit, rabbit_cpu, _ = process_rate("rabbitmq", cfg, 1)
        polling, polling_cpu, _ = process_rate("postgres", cfg, 1)
        dramatiq, _, dramatiq_cpu = dramatiq_bench.process_rate(args.jobs, 1, tmp)
        print(
            f"round {n}: rabbitmq {rabbit:,.0f}/s {rabbit_cpu:.0f} us/job | "
            f"polling {polling:,.0f}/s {polling_cpu:.0f} us/job | "
            f"dramatiq {dramatiq:,.0f}/s {dramatiq_cpu:.0f} us/job | "
            f"rabbitmq/polling {rabbit / polling:.2f}x rabbitmq/dramatiq {rabbit / dramatiq:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
