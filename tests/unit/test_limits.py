"""The rule of flow control (fsm/lifecycle/limits.py), the per-worker caps, the
Prometheus gauges of limits, and the audit-trail checks of the limits model."""

from __future__ import annotations

import re

import pytest

from adapters.memory import MemoryStore
from fsm import Engine
from fsm.errors import BadInput
from fsm.lifecycle.limits import Budget, Limit, allowance, checked, window_start
from fsm.records import Owner
from fsm.service.limits import limit_rows, worker_caps, worker_limits
from fsm.telemetry.prometheus import PrometheusMetrics
from fsm.testing.faults_limits import concurrency_breaches, rate_breaches

OWNER = Owner(host="h", pid=1, incarnation="i")


def test_the_allowance_is_what_the_tightest_bound_leaves_and_never_negative() -> None:
    both = Limit("kind:k", concurrency=5, rate=3, period=1.0)
    assert allowance(both, held=0, recent=0) == 3
    assert allowance(both, held=4, recent=0) == 1
    assert allowance(both, held=9, recent=0) == 0  # lowered below the running: wait
    assert allowance(Limit("kind:k", rate=3, period=1.0), held=100, recent=2) == 1
    assert window_start(both, 10.0) == 9.0
    assert window_start(Limit("kind:k", concurrency=1), 10.0) is None


def test_a_budget_admits_in_order_and_skips_what_a_spent_key_holds_back() -> None:
    engine = Engine(MemoryStore())
    jobs = [engine.submit(k, i) for i, k in enumerate(["a", "a", "b", "a", "b"])]
    budget = Budget.of([Limit("kind:a", concurrency=2)], held={"kind:a": 1}, recent={})
    admitted, held_back = budget.admit(jobs, wanted=10)
    assert [j.kind for j in admitted] == ["a", "b", "b"]
    assert held_back == 2
    assert budget.blocked("kind") == ["a"]


def test_a_workers_caps_are_its_limits_less_what_it_holds() -> None:
    assert worker_caps({"kind:a": 3, "queue:q": 2}, {"kind:a": 1, "queue:q": 5}) == {
        "kind:a": 2,
        "queue:q": 0,
    }
    assert worker_limits({"email": 2, "queue:bulk": 4}) == {"kind:email": 2, "queue:bulk": 4}
    with pytest.raises(BadInput, match="positive integer"):
        worker_limits({"email": 0})


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"concurrency": 10**30}, "positive integer"),
        ({"rate": 1, "period": 10**400}, "finite"),
        ({"rate": 1, "period": "1"}, "number of seconds"),
        ({"concurrency": 1, "origin": "nowhere"}, "origin"),
    ],
)
def test_checked_refuses_values_a_store_cannot_hold(values: dict[str, object], words: str) -> None:
    with pytest.raises(BadInput, match=words):
        checked("kind:k", **values)  # type: ignore[arg-type]


def test_the_gauges_export_holding_and_waiting_per_limit() -> None:
    engine = Engine(MemoryStore())
    for i in range(3):
        engine.submit("email", i)
    engine.set_limit("kind:email", concurrency=1, actor="ops", reason="vendor cap")
    engine.claim(OWNER, limit=3)
    metrics = PrometheusMetrics()
    metrics.watch_limits(lambda: limit_rows(engine))
    text = metrics.render()[0].decode()
    assert re.search(r'^jobfsm_limit_holding\{limit="kind:email"\} 1\.0$', text, re.M)
    assert re.search(r'^jobfsm_limit_waiting\{limit="kind:email"\} 2\.0$', text, re.M)


def test_the_trail_checks_find_one_slot_too_many_and_one_lease_too_many() -> None:
    # three holders at t=1 under a limit of 2 (the one ending at 1 is gone by then)
    intervals = [(0.0, 1.0), (1.0, 5.0), (1.0, 3.0), (1.0, float("inf"))]
    assert concurrency_breaches(intervals, lambda t: 3) == []
    assert concurrency_breaches(intervals, lambda t: 2)[0] == (1.0, 3, 2)
    # 2 per 1 s: leases 1 s apart are fine, 0.999 s apart are not
    assert rate_breaches([0.0, 0.5, 1.0, 1.5, 2.0], rate=2, period=1.0) == []
    assert rate_breaches([0.0, 0.5, 0.999], rate=2, period=1.0) == [(0.0, 3)]


def test_a_limit_declared_with_a_handler_is_stored_at_worker_start_unless_an_operator_set_one() -> (
    None
):
    import threading

    from fsm import Worker
    from fsm.service.identity import Identity

    def send(ctx: object) -> None:
        return None

    def run_once(engine: Engine) -> None:
        worker = Worker(engine, install_signals=False, identity=Identity(), poll_interval=0.05)
        worker.register("email", send, concurrency_limit=2, rate_limit=(10, 1.0))
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        assert worker.wait_started(5.0)
        worker.stop(now=True)
        thread.join(10.0)

    # given a store without limits: a worker stores the handler's, from code
    store = MemoryStore()
    run_once(Engine(store))
    (limit,) = store.limits().values()
    assert (limit.key, limit.concurrency, limit.rate, limit.period, limit.origin) == (
        "kind:email",
        2,
        10,
        1.0,
        "code",
    )
    # a second worker with the same declaration writes nothing more
    run_once(Engine(store))
    assert len(store.limit_changes("kind:email")) == 1
    # an operator's limit wins over the code's
    Engine(store).set_limit("kind:email", concurrency=7, actor="ops", reason="more mail")
    run_once(Engine(store))
    assert store.limits()["kind:email"].concurrency == 7
    # a bad declaration is refused where it is written
    with pytest.raises(BadInput, match="1 ms"):
        Worker(Engine(MemoryStore()), install_signals=False).register(
            "email", send, rate_limit=(5, 0.0001)
        )
