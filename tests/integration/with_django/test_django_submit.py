"""fsm.contrib.django: a job submitted on Django's connection inside `transaction.atomic()`
commits and rolls back with the block, and `manage.py jobfsm_worker` (a real process)
runs it. On the test project's SQLite and PostgreSQL test databases (conftest.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connections, transaction
from jobsite.models import Order

from fsm.contrib.django import get_engine, submit, submit_many
from fsm.errors import BadInput, JobNotFound

from .conftest import PROJECT, worker_env


class Boom(Exception):
    pass


def _stored(job_id: str) -> bool:
    try:
        get_engine().get(job_id)
    except JobNotFound:
        return False
    return True


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_job_submitted_inside_atomic_is_run_by_manage_py_jobfsm_worker(
    site: str, executor: str, tmp_path: Path
) -> None:
    # given an order and its job, committed together by transaction.atomic()
    with transaction.atomic(using=site):
        order = Order.objects.using(site).create(total=100)
        job = submit("order.confirm", {"order": order.pk})
    assert get_engine().get(job.id).state == "queued"
    # when `manage.py jobfsm_worker` runs (the handlers and store of settings.JOBFSM)
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            # process: each child is a fresh process that sets Django up (setup_child)
            [sys.executable, "manage.py", "jobfsm_worker", "--executor", executor],
            cwd=PROJECT,
            env=worker_env(site),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # then its handler runs in the worker, with the ORM: the job succeeds, the order is
        # confirmed
        done = get_engine().wait(job.id, timeout=60)
        assert (done.state, done.result) == ("succeeded", {"confirmed": order.pk}), log.read_text()
        assert Order.objects.using(site).get(pk=order.pk).confirmed
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, log.read_text()


def _order_then_boom(site: str) -> None:
    """An order and its job, in transaction.atomic(); the block raises Boom(job id)."""
    with transaction.atomic(using=site):
        Order.objects.using(site).create(total=100)
        job = submit("order.confirm", {"order": 1})
        assert _stored_on_django_connection(site, job.id)  # written, in the transaction
        raise Boom(job.id)


def test_a_rollback_inside_atomic_leaves_no_job(site: str) -> None:
    # given an order and its job written inside transaction.atomic(), when the block raises
    with pytest.raises(Boom) as raised:
        _order_then_boom(site)
    job_id = raised.value.args[0]
    # then neither the order nor the job nor its audit entry exists
    assert not Order.objects.using(site).exists()
    assert not _stored(job_id)
    assert get_engine().store.history(job_id) == []


def _submit_then_boom(site: str, *, engine_submit: bool = False) -> None:
    with transaction.atomic(using=site):  # a savepoint inside an outer block
        if engine_submit:
            job = get_engine().submit("order.confirm", {"order": 2}, conn=connections[site])
        else:
            job = submit("order.confirm", {"order": 2})
        raise Boom(job.id)


def test_an_inner_atomic_rolled_back_takes_its_job_and_keeps_the_outer_ones(site: str) -> None:
    with transaction.atomic(using=site):
        kept = submit("order.confirm", {"order": 1})
        with pytest.raises(Boom) as raised:
            _submit_then_boom(site)
    assert (_stored(kept.id), _stored(raised.value.args[0])) == (True, False)


def test_a_submit_outside_atomic_is_committed_at_once(site: str) -> None:
    jobs = submit_many([("order.confirm", {"order": 1}, {}), ("order.confirm", {"order": 2}, {})])
    assert all(_stored(job.id) for job in jobs)
    assert connections[site].get_autocommit()  # the block it opened is closed


def test_the_kind_policy_of_the_settings_is_stamped_at_submit(site: str) -> None:
    job = submit("order.confirm", {"order": 1})
    assert (job.retry_safe, job.max_attempts) == (True, 3)  # JOBFSM['KINDS']


def test_engine_submit_on_a_django_connection_outside_atomic_is_refused(site: str) -> None:
    # Engine.submit(conn=<Django connection>) joins the caller's atomic block: without
    # one there is no transaction to join, and nothing is written
    with pytest.raises(BadInput, match=r"autocommit mode: submit inside `transaction.atomic"):
        get_engine().submit("order.confirm", {"order": 1}, conn=connections[site])
    assert get_engine().counts() == {}


def test_engine_submit_on_a_django_connection_joins_its_atomic_block(site: str) -> None:
    with pytest.raises(Boom) as raised:
        _submit_then_boom(site, engine_submit=True)
    assert not _stored(raised.value.args[0])
    with transaction.atomic(using=site):
        job = get_engine().submit("order.confirm", {"order": 1}, conn=connections[site])
    assert _stored(job.id)


def test_a_submit_in_a_block_marked_for_rollback_is_refused(site: str) -> None:
    with transaction.atomic(using=site):
        transaction.set_rollback(True, using=site)
        with pytest.raises(BadInput, match="marked for rollback"):
            submit("order.confirm", {"order": 1})
    assert get_engine().counts() == {}


def _stored_on_django_connection(alias: str, job_id: str) -> bool:
    """Whether the job's row is visible to Django's connection (its own transaction)."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs WHERE id = %s", [job_id])
        row = cursor.fetchone()
    return bool(row and row[0] == 1)


def test_a_unique_submit_inside_atomic_returns_the_job_and_a_rollback_frees_its_key(
    site: str,
) -> None:
    # given a unique submit inside an atomic block, and the same key again in it
    with transaction.atomic(using=site):
        first = submit("order.confirm", {"order": 1}, unique="order-1")
        again = submit("order.confirm", {"order": 1}, unique="order-1")
    assert again.id == first.id
    # when a block that submitted another key rolls back
    with pytest.raises(Boom) as raised:
        _submit_unique_then_boom(site)
    # then that key is free again, and a batch of the first key returns its job
    gone = raised.value.args[0]
    assert not _stored(gone)
    assert submit("order.confirm", {"order": 2}, unique="order-2").id != gone
    jobs = submit_many([("order.confirm", {"order": 1}, {"unique": "order-1"})])
    assert jobs[0].id == first.id


def _submit_unique_then_boom(site: str) -> None:
    with transaction.atomic(using=site):
        job = submit("order.confirm", {"order": 2}, unique="order-2")
        raise Boom(job.id)
