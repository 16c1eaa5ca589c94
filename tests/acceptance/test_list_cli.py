"""`jobfsm list`: repeatable filters, newest first, an error column that keeps the
words that say what happened (issue 34 item 11)."""

from __future__ import annotations

import subprocess
import sys

from fsm import Engine, FakeClock, KindPolicy, Owner, open_store
from fsm.service.identity import current

from ._cli import ok_here, ok_json_here


def _submitted(url: str, specs: list[tuple[str, str]]) -> list[str]:
    """Jobs of (kind, queue), submitted one second apart, oldest first."""
    clock = FakeClock(1_700_000_000.0)
    engine = Engine(open_store(url), clock=clock)
    try:
        ids = []
        for kind, queue in specs:
            ids.append(engine.submit(kind, {}, queue=queue).id)
            clock.advance(1.0)
        return ids
    finally:
        engine.store.close()


def test_repeated_kind_and_queue_options_all_apply(sqlite_url: str) -> None:
    # given jobs of three kinds in three queues
    mail, sms, push, other = _submitted(
        sqlite_url, [("mail", "a"), ("sms", "b"), ("push", "c"), ("mail", "c")]
    )
    # when the list asks for two kinds, then for two queues
    kinds = ok_json_here("list", "--kind", "mail", "--kind", "sms", "--store", sqlite_url)
    queues = ok_json_here("list", "--queue", "a", "--queue", "c", "--store", sqlite_url)
    both = ok_json_here("list", "--kind", "mail", "--queue", "c", "--store", sqlite_url)
    # then every value given applies (not only the last one)
    assert {j["id"] for j in kinds} == {mail, sms, other}
    assert {j["id"] for j in queues} == {mail, push, other}
    assert [j["id"] for j in both] == [other]


def test_list_is_newest_first_unless_asked_for_the_old_order(sqlite_url: str) -> None:
    ids = _submitted(sqlite_url, [("k", "default")] * 3)

    newest = ok_json_here("list", "--store", sqlite_url)
    oldest = ok_json_here("list", "--oldest-first", "--store", sqlite_url)
    capped = ok_json_here("list", "--limit", "2", "--store", sqlite_url)

    assert [j["id"] for j in newest] == ids[::-1]
    assert [j["id"] for j in oldest] == ids
    assert [j["id"] for j in capped] == ids[:0:-1]  # the two newest


def test_the_error_column_shows_what_happened_before_the_owner_id(sqlite_url: str) -> None:
    # given a job recovered from an owner whose process is gone (its error names the
    # owner's long host id first)
    engine = Engine(open_store(sqlite_url), kinds={"k": KindPolicy()})
    try:
        job = engine.submit("k", {})
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        dead = Owner(host=current().host, pid=gone.pid, incarnation="exited")
        (leased,) = engine.claim(dead, ids=[job.id])
        engine.start(job.id, leased.fence)
        ok_here("recover", "--store", sqlite_url)
        stored = engine.get(job.id).last_error or ""
    finally:
        engine.store.close()
    assert stored.startswith("owner ")
    # when it is listed
    out = ok_here("list", "--store", sqlite_url)
    # then its row says why first, with the owner id in its short form after it
    (row,) = [line for line in out.splitlines() if line.startswith(job.id)]
    assert f"pid {gone.pid} is gone on this host (owner " in row
    assert current().host.split(":", 1)[1][:9] not in row  # the host id is shortened
