"""Django's test runner and jobfsm: creating the test database (`migrate`, as
`manage.py test` runs it) creates jobfsm's tables too, through the app's `post_migrate`
handler, so a test that submits inside a transaction (a `TestCase`, or its own
`transaction.atomic()`) finds the store ready. On SQLite the store's first open
(the WAL switch, the migrations) needs the write lock, which the test's transaction
holds: without the handler that submit failed with `database is locked`."""

from __future__ import annotations

import io
import unittest
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.test import TestCase
from django.test.utils import setup_databases, teardown_databases
from jobsite.models import Order

from fsm.contrib.django import close_engine, get_engine, submit
from fsm.contrib.django.apps import prepare_store


@pytest.fixture
def test_database() -> Iterator[str]:
    """The SQLite test database of alias "default" (a file: DATABASES' TEST NAME) as
    Django's test runner creates it, with no `jobfsm_migrate` of its own."""
    close_engine()
    old = setup_databases(
        verbosity=0, interactive=False, aliases={"default"}, serialized_aliases=set()
    )
    try:
        yield "default"
    finally:
        close_engine()
        connections.close_all()
        teardown_databases(old, verbosity=0)


def test_a_submit_inside_atomic_works_on_a_test_database_just_created(test_database: str) -> None:
    # given the test database as the runner made it; when a model and a job are written
    # in one transaction (Django's connection holds the write lock)
    with transaction.atomic(using=test_database):
        order = Order.objects.using(test_database).create(total=1)
        job = submit("order.confirm", {"order": order.pk})
    # then the submit joined it, and the job is committed with the order
    assert get_engine().get(job.id).state == "queued"


def test_a_testcase_that_submits_passes_on_a_test_database_just_created(
    test_database: str,
) -> None:
    # given a TestCase (each test in a transaction rolled back after it) that submits
    class Submits(TestCase):
        databases = {test_database}

        def test_submit(self) -> None:
            order = Order.objects.create(total=1)
            job = submit("order.confirm", {"order": order.pk})
            assert job.state == "queued"

    # when Django's unittest machinery runs it
    out = io.StringIO()
    result = unittest.TextTestRunner(stream=out, verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(Submits)
    )
    # then it passes
    assert result.wasSuccessful(), out.getvalue()


def test_an_in_memory_test_database_is_left_to_the_submit_which_names_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given the default alias pointed at an in-memory database, as Django's test runner
    # names its SQLite test database unless TEST NAME is set
    memory = "file:memorydb_default?mode=memory&cache=shared"
    monkeypatch.setitem(connections["default"].settings_dict, "NAME", memory)
    close_engine()
    # when it is migrated, jobfsm's handler lets migrate go on (no store to prepare)
    prepare_store(using="default")
    # and the first submit refuses it, naming the setting that fixes it
    with pytest.raises(ImproperlyConfigured, match=r"DATABASES\['default'\]\['TEST'\]\['NAME'\]"):
        submit("order.confirm", {"order": 1})
