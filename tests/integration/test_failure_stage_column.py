"""Every store keeps an audit entry's failure stage (`AuditEntry.stage`) beside its
reason code: written with the decision, read back by `history` (SQLite migration 8,
PostgreSQL migration 9; memory keeps the record as it is)."""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import pytest

from fsm import Engine, KindPolicy, open_store
from fsm.service.identity import Identity


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    if request.param == "memory":
        url = "memory://"
    else:
        url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    engine = Engine(open_store(url), kinds={"k": KindPolicy()})
    try:
        yield engine
    finally:
        engine.store.close()


def test_an_audit_entrys_stage_is_stored_and_read_back(engine: Engine) -> None:
    # given a running job and a fail decision whose entry names a stage
    engine.submit("k", {})
    [job] = engine.claim(Identity().owner, ["default"], limit=1, start=lambda _job: {})
    decision = engine.kernel.decide(job, "fail", engine.clock.now(), fence=job.fence, error="boom")
    assert decision.entry is not None
    staged = attrs.evolve(decision, entry=attrs.evolve(decision.entry, stage="report"))
    # when the store applies it
    engine.store.apply([staged])
    # then history reads the stage back, and entries without one read None
    entries = engine.history(job.id)
    assert entries[-1].event == "fail"
    assert entries[-1].stage == "report"
    assert entries[0].stage is None
