"""An order and its confirmation job, committed together (transactional submit).

    python -m examples.orders                                  # SQLite in a temp dir
    python -m examples.orders --store postgresql://postgres@127.0.0.1/mydb

The application writes its `orders` row and submits the `order.confirm` job on the
same connection, in one transaction (`engine.submit(..., conn=conn)`): the job exists
if and only if the order does. The run places two orders, one of which fails after
its job was submitted and is rolled back, then runs a worker until the committed
order is confirmed, and prints what is stored:

    order o-1: committed, job succeeded
    order o-2: rolled back, no job

It exits 1 if anything else is found. See docs/transactional-submit.md.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from fsm import Engine
from fsm.registry import open_store
from fsm.worker import Context, Handlers, Worker

handlers = Handlers()
CONFIRMED: list[str] = []


@handlers.handler("order.confirm")
def confirm(ctx: Context) -> dict[str, str]:
    CONFIRMED.append(ctx.payload["order"])  # a real service would send an email here
    return {"confirmed": ctx.payload["order"]}


class PaymentDeclined(Exception):
    pass


def connect(url: str) -> Any:
    """The application's own connection to the database the store lives in."""
    if url.startswith("sqlite:///"):
        return sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30)
    import psycopg

    return psycopg.connect(url)


def place_order(engine: Engine, url: str, order_id: str, *, decline: bool) -> str | None:
    """Write the order and submit its confirmation in one transaction; the job id, or
    None if the order was rolled back."""
    conn = connect(url)
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    try:
        conn.execute(
            f"INSERT INTO orders (id, total_cents) VALUES ({mark}, {mark})", (order_id, 4200)
        )
        job = engine.submit("order.confirm", {"order": order_id}, conn=conn)
        if decline:
            raise PaymentDeclined(order_id)  # after the submit: the job must go too
        conn.commit()
        return job.id
    except PaymentDeclined:
        conn.rollback()
        return None
    finally:
        conn.close()


def run(url: str) -> int:
    store = open_store(url)
    engine = Engine(store)
    setup = connect(url)
    setup.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total_cents INTEGER)")
    setup.commit()
    setup.close()
    try:
        kept = place_order(engine, url, "o-1", decline=False)
        dropped = place_order(engine, url, "o-2", decline=True)
        if kept is None or dropped is not None:
            print("the orders were not placed as planned")
            return 1
        worker = Worker(engine, handlers, poll_interval=0.1, install_signals=False, scheduler=False)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        job = engine.wait(kept, timeout=30)
        worker.stop()
        thread.join(timeout=30)
        conn = connect(url)
        orders = [r[0] for r in conn.execute("SELECT id FROM orders ORDER BY id").fetchall()]
        conn.close()
        jobs = sum(store.counts().values())
        print(f"order o-1: {'committed' if 'o-1' in orders else 'missing'}, job {job.state}")
        print(
            f"order o-2: {'rolled back' if 'o-2' not in orders else 'stored'}, "
            f"{'no job' if jobs == 1 else f'{jobs - 1} stray job(s)'}"
        )
        ok = orders == ["o-1"] and jobs == 1 and job.state == "succeeded" and CONFIRMED == ["o-1"]
        return 0 if ok else 1
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--store", default=None, help="sqlite:///path.db or postgresql://...")
    args = parser.parse_args(argv)
    if args.store is not None:
        return run(args.store)
    with tempfile.TemporaryDirectory() as tmp:
        return run(f"sqlite:///{Path(tmp) / 'orders.db'}")


if __name__ == "__main__":
    sys.exit(main())
