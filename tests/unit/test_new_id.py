"""`new_id`: 26 Crockford characters, time-sortable, never repeated across threads or forks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from fsm import records
from fsm.records import ENTROPY_BLOCK, new_id


def test_an_id_is_26_crockford_characters_that_sort_by_time() -> None:
    earlier, later = new_id(1_000.0), new_id(1_000.001)
    assert len(earlier) == 26
    assert set(earlier) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    assert earlier < later


def test_one_read_of_the_operating_system_serves_a_block_of_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a fresh source whose reads of the OS's randomness are counted
    reads: list[int] = []
    real = records.os.urandom

    def counted(n: int) -> bytes:
        reads.append(n)
        return real(n)

    monkeypatch.setattr(records.os, "urandom", counted)
    entropy = records.Entropy()
    # when 2 blocks' worth of ids and one more take their 10 random bytes each
    per_block = ENTROPY_BLOCK // 10
    taken = [entropy.take(10) for _ in range(2 * per_block + 1)]
    # then the OS was asked three times, a block each, and no bytes were handed out twice
    assert reads == [ENTROPY_BLOCK] * 3
    assert len(set(taken)) == len(taken)


def test_ids_made_by_many_threads_at_once_are_all_different() -> None:
    # given 8 threads that start together
    start = threading.Barrier(8)
    made: list[list[str]] = [[] for _ in range(8)]

    def make(out: list[str]) -> None:
        start.wait()
        out.extend(new_id(1_000.0) for _ in range(5_000))  # one millisecond: only randomness

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # then 40,000 ids of the same millisecond hold no duplicate
    ids = [i for out in made for i in out]
    assert len(ids) == 40_000
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_repeat_the_ids_its_parent_makes_next() -> None:
    # given a process that made one id (its block of randomness is half used) and forks
    script = textwrap.dedent(
        """
        import os
        from fsm.records import new_id
        new_id(1_000.0)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, " ".join(new_id(1_000.0) for _ in range(100)).encode())
            os._exit(0)
        os.close(write)
        mine = [new_id(1_000.0) for _ in range(100)]
        os.waitpid(pid, 0)
        theirs = b""
        while chunk := os.read(read, 65536):
            theirs += chunk
        print(len(set(mine) & set(theirs.decode().split())), len(theirs.decode().split()))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    # when both make their next 100 ids, then none is shared
    assert out.stdout.split() == ["0", "100"]
