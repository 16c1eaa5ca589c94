"""Cross-host liveness: session advisory locks held by real processes, really killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from adapters.postgres import open_store
from adapters.postgres.liveness import CHECK_INTERVAL, TCP_USER_TIMEOUT_MS, lock_key
from adapters.postgres.migrations import LIVENESS_CLASS
from fsm.records import Owner

pytestmark = pytest.mark.postgres

HOLDER = """
import sys, time
from adapters.postgres import open_store
from fsm.records import Owner
store = open_store(sys.argv[1])
store.liveness.hold(Owner("host-b", 4242, sys.argv[2]), lambda: None)
print("held", flush=True)
time.sleep(120)
"""


def _owner(name: str) -> Owner:
    return Owner("host-a", os.getpid(), f"incarnation-{name}")


def test_a_killed_holder_process_is_confirmed_dead_within_a_second(pg_url: str) -> None:
    store = open_store(pg_url)
    incarnation = "child-incarnation"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pg_url, incarnation], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        owner = Owner("host-b", 4242, incarnation)
        # given a live holder on another "host"
        assert store.liveness.probe(owner) == "alive"
        # when it is killed with SIGKILL
        child.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        child.wait(10)
        # then its lock is free and a probe confirms death within about a second
        verdict = store.liveness.probe(owner)
        while verdict != "dead" and time.monotonic() - killed < 5:
            time.sleep(0.02)
            verdict = store.liveness.probe(owner)
        assert verdict == "dead"
        assert time.monotonic() - killed < 1.5
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        if child.stdout is not None:
            child.stdout.close()
        store.close()


def test_a_terminated_liveness_session_calls_on_lost_once_within_its_bound(
    pg_url: str, admin: Any
) -> None:
    store = open_store(pg_url)
    owner = _owner("terminated")
    lost: list[float] = []
    called = threading.Event()

    def on_lost() -> None:
        lost.append(time.monotonic())
        called.set()

    try:
        store.liveness.hold(owner, on_lost)
        # given the server ends the holder's session (admin, failover, network cut)
        pid = admin.one(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s "
            "AND objid::bigint = %s::bigint & 4294967295 AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            LIVENESS_CLASS,
            lock_key(owner)[1],
        )
        assert pid is not None
        terminated = time.monotonic()
        admin.one("SELECT pg_terminate_backend(%s)", pid)
        # then on_lost fires once, well within CHECK_INTERVAL + TCP_USER_TIMEOUT
        assert called.wait(CHECK_INTERVAL + TCP_USER_TIMEOUT_MS / 1000)
        assert lost[0] - terminated < 1.0
        time.sleep(CHECK_INTERVAL * 1.5)
        assert len(lost) == 1
        assert not store.liveness.held(owner)
        # and the owner now reads as dead to everyone (it must stop acting on its leases)
        assert store.liveness.probe(owner) == "dead"
    finally:
        store.close()


def test_an_owner_that_never_held_or_released_its_lock_is_unknown_never_dead(
    pg_url: str,
) -> None:
    store = open_store(pg_url)
    owner = _owner("released")
    calls: list[str] = []
    try:
        assert store.liveness.probe(_owner("never-held")) == "unknown"
        store.liveness.hold(owner, lambda: calls.append("lost"))
        assert store.liveness.probe(owner) == "alive"
        store.liveness.release(owner)
        assert store.liveness.probe(owner) == "unknown"
        assert calls == []
    finally:
        store.close()


def test_a_probe_that_cannot_reach_the_server_says_unknown(pg_url: str) -> None:
    store = open_store(pg_url)
    owner = _owner("unreachable")
    store.liveness.hold(owner, lambda: None)
    store.close()  # the probe can no longer reach PostgreSQL
    assert store.liveness.probe(owner) == "unknown"


def test_holding_again_while_held_is_a_no_op(pg_url: str, admin: Any) -> None:
    store = open_store(pg_url)
    owner = _owner("twice")
    try:
        store.liveness.hold(owner, lambda: None)
        store.liveness.hold(owner, lambda: None)
        held = admin.one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid::bigint = %s AND objid::bigint = %s::bigint & 4294967295",
            LIVENESS_CLASS,
            lock_key(owner)[1],
        )
        assert held == 1
    finally:
        store.close()
