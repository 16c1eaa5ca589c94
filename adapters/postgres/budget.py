"""How many PostgreSQL connections one process holds, by what it does (its shape).

Two kinds of connections:

- **pooled**: the store's pools, borrowed for one call and given back. The blocking
  pool (`PostgresStore`) and the asyncio pool (`AsyncPostgresStore`) hold at most
  `pool_max` each, open no connection before their first call and keep `pool_min`
  (default 0) when idle; psycopg_pool closes a connection idle for 10 minutes beyond
  `pool_min`. A transaction-pooling proxy (PgBouncer `pool_mode = transaction`) can
  serve them.
- **dedicated**: one server session each for as long as it lives, outside the pools:
  `listen` (a polling worker's LISTEN for new jobs, opened on its first wait),
  `wait` (LISTEN for final states, opened by the first `Engine.wait` /
  `AsyncEngine.wait`), `liveness` (a worker's session advisory lock). They need the
  server session itself: PostgreSQL directly, or a proxy in `pool_mode = session`.
  `admin` connections (migrations and checks while a store opens) are closed before
  `open_store` returns and are not counted.

`shapes(settings)` is the table docs/stores.md shows (`table`); the tests count the
real connections of each shape in `pg_stat_activity`. Each connection is named by its
role there (`_url.ROLES`, as libpq's `fallback_application_name`) unless the URL sets
`application_name`.
"""

from __future__ import annotations

import attrs

from ._url import ROLES, Settings

#: dedicated connections that need one server session for their whole life
SESSION_ROLES = ("listen", "wait", "liveness")


@attrs.frozen
class Shape:
    """One kind of process: `pools` pools of `pool_max` each, plus `dedicated` roles."""

    name: str
    pools: int
    dedicated: tuple[str, ...]

    def total(self, settings: Settings) -> int:
        """The most connections such a process holds at once."""
        return self.pools * settings.pool_max + len(self.dedicated)

    def formula(self) -> str:
        pooled = "pool_max" if self.pools == 1 else f"{self.pools} * pool_max"
        return " + ".join([pooled, *self.dedicated])


#: every process shape jobfsm knows, in the order the docs list them
SHAPES = (
    Shape("submits (`AsyncEngine.open(url)`, or `Engine(open_store(url))`)", 1, ()),
    Shape("submits and waits (`wait`)", 1, ("wait",)),
    Shape("submits through both an `Engine` and an `AsyncEngine` over it, and waits", 2, ("wait",)),
    Shape("`jobfsm worker` (polling delivery, the default)", 1, ("listen", "liveness")),
    Shape("`jobfsm worker --delivery amqp://...` (RabbitMQ)", 1, ("liveness",)),
)


def table(settings: Settings) -> str:
    """The budget as a Markdown table, totals for `settings` (docs/stores.md)."""
    rows = [
        f"| process | connections | with `pool_max={settings.pool_max}` |",
        "|---|---|---|",
    ]
    for shape in SHAPES:
        rows.append(f"| {shape.name} | {shape.formula()} | {shape.total(settings)} |")
    names = ", ".join(f"`{ROLES[role]}` ({role})" for role in SESSION_ROLES)
    rows.append("")
    rows.append(f"Need a server session of their own (never transaction pooling): {names}.")
    return "\n".join(rows) + "\n"
