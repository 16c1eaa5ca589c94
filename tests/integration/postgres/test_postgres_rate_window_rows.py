"""PostgreSQL rate windows forget their old leases now and then, not at every claim:
the claim whose leases carry a key's running total past a multiple of
`EXPIRE_EVERY` (or of the rate, if lower) deletes the rows that left its window, so a
key keeps the rows of at most rate + min(rate, EXPIRE_EVERY) leases, and the window
stays exact (the count reads only the rows inside it)."""

from __future__ import annotations

import psycopg
import pytest

from adapters.postgres import open_store
from adapters.postgres.limits import EXPIRE_EVERY
from fsm import Engine, FakeClock
from fsm.records import Owner
from fsm.testing.faults_limits import lease_times, rate_breaches

pytestmark = pytest.mark.postgres

ACTOR, REASON = "rate-window-test", "how many window rows a key keeps"
OWNER = Owner("host-rate-window", 7100, "inc-rate-window")


def _rows(url: str, schema: str, key: str) -> tuple[int, int]:
    """(rows, leases) of `key` in `limit_leases`."""
    base = url.split("?", 1)[0]
    with psycopg.connect(base, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT count(*), coalesce(sum(n), 0) FROM "{schema}".limit_leases WHERE key = %s',
            (key,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize(("rate", "batch"), [(7, 3), (40, 6)])
def test_a_key_keeps_the_rows_of_at_most_rate_plus_its_expiry_step_and_stays_exact(
    pg_schema_url: str, rate: int, batch: int
) -> None:
    # given a kind limited to `rate` leases a second, on a fake clock
    clock = FakeClock()
    engine = Engine(open_store(pg_schema_url), clock=clock)
    try:
        jobs = engine.submit_many([("rated", i, {}) for i in range(4 * rate)])
        engine.set_limit("kind:rated", rate=rate, period=1.0, actor=ACTOR, reason=REASON)
        schema = engine.store.schema  # type: ignore[attr-defined]
        bound = rate + min(rate, EXPIRE_EVERY)
        leased_total, most = 0, 0
        # when claims take what the window leaves, a quarter second apart, for 10 s
        for _ in range(40):
            leased_in_tick = 0
            while got := engine.claim(OWNER, limit=batch):
                engine.report_many([(j, "release", {"fence": j.fence}) for j in got])
                leased_in_tick += len(got)
            leased_total += leased_in_tick
            rows, leases = _rows(pg_schema_url, schema, "kind:rated")
            most = max(most, leases)
            # then the key never keeps more rows than the bound
            assert leases <= bound, (rows, leases, bound)
            clock.advance(0.25)
        # and the window stayed exact: `rate` leases each second (a window opens every
        # fourth tick), none held back by a row left behind, no window over the rate
        assert leased_total == 10 * rate
        assert most < leased_total  # old leases were forgotten
        times = [t for job in jobs for t in lease_times(engine.history(job.id))]
        assert len(times) == leased_total
        assert rate_breaches(times, rate, 1.0) == []
    finally:
        engine.store.close()
