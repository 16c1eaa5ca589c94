"""A FastAPI service on PostgreSQL: an order and its confirmation job commit together,
and the request waits a bounded time for the job's outcome. docs/fastapi.md explains it.

    pip install -e '.[examples]'      # FastAPI, uvicorn, psycopg (`dev` has them too)
    export DATABASE_URL=postgresql://app@db/app
    uvicorn examples.fastapi_app:app --workers 2                          # web processes
    jobfsm worker --app examples.fastapi_app:handlers --store "$DATABASE_URL"  # workers
    curl -X POST localhost:8000/orders -H 'content-type: application/json' \\
        -d '{"id": "o-1", "sku": "widget", "quantity": 2}'

- The lifespan opens one `AsyncEngine` and one small connection pool per web process
  and closes both at shut-down; `job_engine` and `db_connection` are the dependencies
  that hand them to a request.
- POST /orders inserts the order, submits its `order.confirm` job on the same
  connection, then reserves the stock, all in one transaction: the order and its job
  commit together, or (not enough stock: 409) neither exists.
- After the commit it awaits the job's outcome for at most `wait` seconds (bounded by
  MAX_WAIT): 200 with the result, or 202 with the job's address while it still runs.
- Handlers never run in the web process: `jobfsm worker` processes run them, started
  and scaled on their own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

from fsm import AsyncEngine, Context, Handlers, Job, JobNotFound, WaitTimeout

#: the longest a request waits for its job (seconds); the client may ask for less
MAX_WAIT = 10.0
#: connections of this process's own pool (the AsyncEngine has its own: `pool_max=`)
DB_POOL_MAX = 4
#: stock the example starts with
STOCK = {"widget": 10, "gadget": 3}

SCHEMA = """
CREATE TABLE IF NOT EXISTS stock (
    sku text PRIMARY KEY,
    available integer NOT NULL CHECK (available >= 0)
);
CREATE TABLE IF NOT EXISTS orders (
    id text PRIMARY KEY,
    sku text NOT NULL REFERENCES stock (sku),
    quantity integer NOT NULL CHECK (quantity > 0)
);
"""

handlers = Handlers()


@handlers.handler("order.confirm", retry_safe=True, timeout=30, max_attempts=3)
def confirm_order(ctx: Context) -> dict[str, Any]:
    """Stands in for the confirmation email; retry-safe (the provider dedupes on the key)."""
    order = ctx.payload["order"]
    return {"order": order, "confirmed": True, "idempotency_key": f"confirm:{order}"}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    url = os.environ["DATABASE_URL"]
    async with (
        await AsyncEngine.open(url) as jobs,
        AsyncConnectionPool(url, min_size=1, max_size=DB_POOL_MAX, open=False) as pool,
    ):
        async with pool.connection() as conn:
            await conn.execute(SCHEMA)
            for sku, available in STOCK.items():
                await conn.execute(
                    "INSERT INTO stock (sku, available) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    (sku, available),
                )
        app.state.jobs = jobs
        app.state.pool = pool
        yield


app = FastAPI(title="orders", lifespan=lifespan)


async def job_engine(request: Request) -> AsyncIterator[AsyncEngine]:
    """The process's AsyncEngine (opened by the lifespan)."""
    yield request.app.state.jobs


async def db_connection(request: Request) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of the pool for one request, given back when the request ends."""
    async with request.app.state.pool.connection() as conn:
        yield conn


Jobs = Annotated[AsyncEngine, Depends(job_engine)]
Db = Annotated[psycopg.AsyncConnection[Any], Depends(db_connection)]


class OrderIn(BaseModel):
    id: str = Field(min_length=1, max_length=64)
    sku: str = Field(min_length=1, max_length=64)
    quantity: int = Field(gt=0, le=1000)
    wait: float = Field(default=5.0, ge=0, le=MAX_WAIT)


@app.post("/orders")
async def place_order(order: OrderIn, jobs: Jobs, conn: Db) -> JSONResponse:
    try:
        async with conn.transaction():  # the order, its job and the reservation, or none
            await conn.execute(
                "INSERT INTO orders (id, sku, quantity) VALUES (%s, %s, %s)",
                (order.id, order.sku, order.quantity),
            )
            job = await jobs.submit(
                "order.confirm", {"order": order.id}, idempotency_key=f"order:{order.id}", conn=conn
            )
            await conn.execute(  # after the submit: a refusal here rolls the job back too
                "UPDATE stock SET available = available - %s WHERE sku = %s",
                (order.quantity, order.sku),
            )
    except psycopg.errors.CheckViolation:
        raise HTTPException(409, f"not enough {order.sku} in stock") from None
    except (psycopg.errors.UniqueViolation, psycopg.errors.ForeignKeyViolation) as err:
        raise HTTPException(409, err.diag.message_primary or "conflict") from None
    # committed: waiting inside the transaction would never see a worker run the job
    try:
        done = await jobs.wait(job.id, timeout=order.wait)
    except WaitTimeout:
        return JSONResponse({"order": order.id, "job": job.id, "href": f"/jobs/{job.id}"}, 202)
    return JSONResponse({"order": order.id, **job_view(done)})


@app.get("/jobs/{job_id}")
async def get_job(job_id: str, jobs: Jobs) -> dict[str, Any]:
    try:
        return job_view(await jobs.get(job_id))
    except JobNotFound:
        raise HTTPException(404, "no such job") from None


def job_view(job: Job) -> dict[str, Any]:
    return {"job": job.id, "state": job.state, "result": job.result, "error": job.last_error}
