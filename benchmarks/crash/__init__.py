"""The crash-recovery suite: kill -9 (and SIGSTOP) of a worker mid-job, jobfsm beside its peers.

Every scenario starts two workers of one system and waits until both are ready,
submits one job that records its start, sleeps (3 s quick, 30 s full) and records
its completion, then:

- kill: `kill -9` the process running the job 1 s (quick) / 2 s (full) after it
  started; the other worker, already started and ready, is the fresh one. Figure:
  seconds from the kill to the job's next start (unit "s"); facts: re-runs,
  double completions, lost and stuck jobs.
- zombie: SIGSTOP the worker running the job instead; once another worker has re-run
  it, SIGCONT the frozen one and let it finish. Figure: runs in which the job's effect
  was committed twice (unit "effects"); jobfsm fences it with `ctx.fence`, the peers
  cannot.

The scenarios mostly sleep, so they run concurrently in threads, each in its own
PostgreSQL database, SQLite file or RabbitMQ queue (`benchmarks.crash.suite`, the
suite's plan). The peers' worker processes import their app from this package, so
nothing is imported here.
"""
