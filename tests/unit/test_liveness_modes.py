"""Lease-only liveness (for hosts without /proc, such as macOS), forced on Linux.

In "lease" mode no pid is judged: a process on "this host" may be one on another
host that shares its name, so only this process's own registry and the store's
liveness token confirm death, and everything else waits for the lease.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fsm.errors import BadInput
from fsm.records import Owner
from fsm.service import identity as identity_mod
from fsm.service.identity import LIVENESS_ENV, Identity, Status, liveness_mode


def _a_dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)  # reaped: the pid is gone
    return child.pid


def test_lease_only_liveness_judges_no_pid_on_this_host() -> None:
    # given a pid that is gone, and the same host judged in each mode
    dead = _a_dead_pid()
    full, lease = Identity(liveness="full"), Identity(liveness="lease")
    # when each judges an owner on its own host with that pid
    by_pid = full.judge(Owner(full.host, dead, "gone"))
    by_lease = lease.judge(Owner(lease.host, dead, "gone"))
    # then full mode confirms the death; lease-only mode leaves it to the lease
    assert (by_pid.status, by_pid.code) == (Status.DEAD, "owner_dead_pid_gone")
    assert by_lease.status is Status.UNKNOWN
    assert "the lease decides" in by_lease.reason


def test_lease_only_liveness_keeps_its_own_registry_and_the_stores_token() -> None:
    lease = Identity(liveness="lease")
    me = lease.owner
    # this very process, no longer holding the run: dead (it knows its own runs)
    assert lease.judge(me, ("job-1", 1)).code == "owner_dead_not_held"
    lease.hold("job-1", 1)
    assert lease.judge(me, ("job-1", 1)).status is Status.ALIVE
    # another process whose liveness token the store says is free: dead
    other = Owner(lease.host, _a_dead_pid(), "other")
    verdict = lease.judge(other, ("job-2", 1), probe=lambda o: "dead")
    assert (verdict.status, verdict.code) == (Status.DEAD, "owner_dead_lock_free")


def test_a_lease_only_host_identity_is_never_taken_for_a_full_one() -> None:
    full, lease = Identity(liveness="full"), Identity(liveness="lease")
    assert lease.host.endswith(":lease-only")
    assert full.host != lease.host
    # a full-mode judge sees a lease-only owner as another host: never judged by pid
    verdict = full.judge(Owner(lease.host, _a_dead_pid(), "x"))
    assert verdict.status is Status.UNKNOWN


def test_the_mode_comes_from_the_environment_and_a_bad_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LIVENESS_ENV, "lease")
    assert Identity().liveness == "lease"
    monkeypatch.setenv(LIVENESS_ENV, "sometimes")
    with pytest.raises(BadInput, match=LIVENESS_ENV):
        Identity()
    with pytest.raises(BadInput, match="liveness mode must be one of auto, full, lease"):
        liveness_mode("psychic")


def test_auto_picks_lease_only_where_proc_has_no_boot_id(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # given a host whose /proc gives no boot id or PID namespace (as on macOS)
    monkeypatch.delenv(LIVENESS_ENV, raising=False)
    assert liveness_mode("auto") == "full"  # this Linux host has them
    monkeypatch.setattr(identity_mod, "PROC_ROOT", str(tmp_path))
    # then auto degrades to lease-only, and full is refused with the way out
    assert liveness_mode("auto") == "lease"
    assert Identity().liveness == "lease"
    with pytest.raises(BadInput, match="'lease' or 'auto'"):
        liveness_mode("full")
