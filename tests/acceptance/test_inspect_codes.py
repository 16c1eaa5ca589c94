"""`jobfsm inspect` shows every audit entry's reason code and the run's marks."""

from __future__ import annotations

from fsm import Engine, Owner, open_store

from ._cli import ok_here, ok_json_here

WORKER = Owner(host="host-a", pid=4242, incarnation="inc-a")


def test_inspect_shows_reason_codes_and_the_marks_of_a_run(sqlite_url: str) -> None:
    engine = Engine(open_store(sqlite_url))
    try:
        job = engine.submit("pay", {"amount": 5}, retry_safe=False)
        (leased,) = engine.claim(WORKER, ids=[job.id])
        engine.start(job.id, leased.fence)
        engine.mark(job.id, leased.fence, "calling the payment provider", "ch_123")
        engine.fail(job.id, leased.fence, "provider said no", permanent=True)
    finally:
        engine.store.close()

    out = ok_here("inspect", job.id, "--store", sqlite_url)
    data = ok_json_here("inspect", job.id, "--store", sqlite_url)

    assert "code" in out.splitlines()[out.splitlines().index("audit trail") + 1]
    for code in ("submitted", "leased", "started", "mark", "permanent_error"):
        assert code in out
    assert "run marks" in out
    assert "calling the payment provider [ch_123]" in out
    assert [e["code"] for e in data["history"]] == [
        "submitted",
        "leased",
        "started",
        "mark",
        "permanent_error",
    ]
    assert data["job"]["marks"] == 1
