"""Owner identity and liveness verdicts (fsm.service.identity): real processes, a real fork."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from fsm.records import Owner
from fsm.service import identity as owner_mod
from fsm.service.identity import HOST_ENV, Identity, Status, host_identity


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_host_identity_joins_hostname_boot_id_and_pid_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(HOST_ENV, raising=False)
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
        boot = f.read().strip()
    pidns = os.readlink("/proc/self/ns/pid").rsplit("[", 1)[-1].rstrip("]")

    assert host_identity() == f"{socket.gethostname()}:{boot}:{pidns}"


def test_host_identity_can_be_overridden_for_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_ENV, "pretend-host")

    assert host_identity() == "pretend-host"
    assert Identity().owner.host == "pretend-host"


def test_every_identity_has_its_own_incarnation() -> None:
    a, b = Identity(), Identity()

    assert a.owner.pid == b.owner.pid == os.getpid()
    assert a.owner.incarnation != b.owner.incarnation


def test_no_owner_identity_is_unknown() -> None:
    me = Identity()

    assert me.judge(None, ("job-1", 1)).status is Status.UNKNOWN
    assert me.judge(Owner(host="", pid=1, incarnation="x")).status is Status.UNKNOWN


def test_own_incarnation_holding_the_job_is_alive() -> None:
    me = Identity()
    me.hold("job-1", 3)

    verdict = me.judge(me.owner, ("job-1", 3))

    assert verdict.status is Status.ALIVE


def test_own_incarnation_not_holding_the_job_is_dead_with_a_reason() -> None:
    me = Identity()
    me.hold("job-1", 3)
    me.drop("job-1", 3)

    verdict = me.judge(me.owner, ("job-1", 3))

    assert verdict.status is Status.DEAD
    assert "no longer holds" in verdict.reason


def test_an_abandoned_job_is_dead_with_the_abandon_reason() -> None:
    me = Identity()
    me.hold("job-1", 3)
    me.drop("job-1", 3, abandoned="attempt abandoned: timed out")

    assert me.judge(me.owner, ("job-1", 3)).reason == "attempt abandoned: timed out"


def test_own_jobs_are_alive_while_a_claim_is_in_flight() -> None:
    me = Identity()

    with me.claiming():
        during = me.judge(me.owner, ("job-being-claimed", 1))
    after = me.judge(me.owner, ("job-being-claimed", 1))

    assert during.status is Status.ALIVE
    assert after.status is Status.DEAD


def test_same_host_with_the_pid_gone_is_dead() -> None:
    me = Identity()
    gone = Owner(host=me.host, pid=_dead_pid(), incarnation="old")

    verdict = me.judge(gone, ("job-1", 1))

    assert verdict.status is Status.DEAD
    assert f"pid {gone.pid} is gone" in verdict.reason


def test_same_host_with_an_unreaped_zombie_pid_is_dead() -> None:
    me = Identity()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # Wait for the exit without reaping: the pid stays a zombie.
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        verdict = me.judge(Owner(host=me.host, pid=proc.pid, incarnation="z"), ("job-1", 1))
    finally:
        proc.wait()

    assert verdict.status is Status.DEAD
    assert "zombie" in verdict.reason


def test_same_host_with_a_live_pid_of_another_incarnation_is_unknown() -> None:
    # pid reuse: a live pid is no proof the owner lives; the lease decides.
    me = Identity()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        verdict = me.judge(Owner(host=me.host, pid=proc.pid, incarnation="other"), ("job-1", 1))
    finally:
        proc.kill()
        proc.wait()

    assert verdict.status is Status.UNKNOWN
    assert "lease decides" in verdict.reason


def test_another_incarnation_of_our_own_pid_is_unknown() -> None:
    me = Identity()
    twin = Owner(host=me.host, pid=me.pid, incarnation="another")

    assert me.judge(twin, ("job-1", 1)).status is Status.UNKNOWN


def test_a_pid_we_may_not_signal_is_never_dead(monkeypatch: pytest.MonkeyPatch) -> None:
    # EPERM means the pid exists: fail closed. (Root can signal anything, so the
    # syscall's answer is substituted here.)
    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(owner_mod.os, "kill", refuse)
    me = Identity()

    verdict = me.judge(Owner(host=me.host, pid=_dead_pid(), incarnation="x"), ("job-1", 1))

    assert verdict.status is Status.UNKNOWN


def test_another_host_is_unknown_without_a_probe() -> None:
    me = Identity()

    verdict = me.judge(Owner(host="elsewhere", pid=_dead_pid(), incarnation="x"), ("job-1", 1))

    assert verdict.status is Status.UNKNOWN


@pytest.mark.parametrize(
    ("answer", "status"),
    [("dead", Status.DEAD), ("alive", Status.ALIVE), ("unknown", Status.UNKNOWN)],
)
def test_another_host_follows_the_store_liveness_probe(answer: str, status: Status) -> None:
    me = Identity()
    other = Owner(host="elsewhere", pid=12, incarnation="x")

    verdict = me.judge(other, ("job-1", 1), probe=lambda o: answer)

    assert verdict.status is status


def test_a_failing_probe_is_unknown() -> None:
    def broken(o: Owner) -> str:
        raise OSError("connection refused")

    verdict = Identity().judge(Owner(host="elsewhere", pid=12, incarnation="x"), ("j", 1), broken)

    assert verdict.status is Status.UNKNOWN
    assert "probe failed" in verdict.reason


def test_a_forked_child_has_a_new_incarnation_and_holds_no_lease() -> None:
    me = Identity()
    me.hold("job-1", 7)
    parent = me.owner
    read, write = os.pipe()

    pid = os.fork()
    if pid == 0:  # child: report what it believes, then leave at once
        try:
            child = me.owner
            report = {
                "pid": child.pid,
                "incarnation": child.incarnation,
                "held": sorted(me.held()),
                "parent_job": me.judge(parent, ("job-1", 7)).status.value,
                "own_job": me.judge(child, ("job-1", 7)).status.value,
            }
            os.write(write, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        report = json.loads(f.read())
    os.waitpid(pid, 0)

    assert report["pid"] == pid != parent.pid
    assert report["incarnation"] != parent.incarnation
    assert report["held"] == []
    assert report["own_job"] == "dead"  # the child never believes it holds the parent's job
    assert report["parent_job"] == "unknown"  # the parent is alive: its lease decides
    assert me.held() == {("job-1", 7)}  # the parent still holds it


def test_a_live_local_pid_whose_liveness_token_is_free_is_dead() -> None:
    # the process lives on but lost its token: it has stopped its handlers by contract
    me = Identity()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        owner = Owner(host=me.host, pid=proc.pid, incarnation="lost-token")
        dead = me.judge(owner, ("job-1", 1), probe=lambda o: "dead")
        held = me.judge(owner, ("job-1", 1), probe=lambda o: "alive")
    finally:
        proc.kill()
        proc.wait()

    assert dead.status is Status.DEAD
    assert "liveness token is free" in dead.reason
    assert held.status is Status.UNKNOWN  # a live pid says nothing more; the lease decides


def test_an_old_incarnation_of_this_pid_with_a_free_token_is_dead() -> None:
    me = Identity()
    old = Owner(host=me.host, pid=me.pid, incarnation="before-renewal")

    assert me.judge(old, ("job-1", 1), probe=lambda o: "dead").status is Status.DEAD


def test_a_late_old_run_of_a_job_never_unregisters_its_new_run() -> None:
    # given this process ran a job under fence 1, lost it, and now runs it under fence 2
    me = Identity()
    me.hold("job-1", 1)
    me.hold("job-1", 2)
    # when the old run finally ends and is dropped
    me.drop("job-1", 1)
    # then the new run is still held: a sweep judges it alive, the old one dead
    assert me.judge(me.owner, ("job-1", 2)).status is Status.ALIVE
    assert me.judge(me.owner, ("job-1", 1)).status is Status.DEAD
