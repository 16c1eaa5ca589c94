"""Handlers with typed payloads (docs/typed-payloads.md), for thread and process
executors: each returns what it received, so a test sees the type from outside."""

from __future__ import annotations

from datetime import datetime

import attrs
import pydantic

from fsm.worker.context import Context
from fsm.worker.handlers import Handlers


@attrs.frozen
class Address:
    city: str
    zip: str


@attrs.frozen
class Email:
    to: str
    subject: str
    attempts: int = 1
    address: Address | None = None
    tags: list[str] = attrs.Factory(list)
    at: datetime | None = None


class Invoice(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    number: int
    amount: float
    customer: str


handlers = Handlers()


@handlers.handler("email.send", payload_type=Email)
def send(ctx: Context) -> dict[str, object]:
    email = ctx.payload
    assert isinstance(email, Email), type(email)
    city = email.address.city if email.address else None
    at = email.at.isoformat() if email.at else None
    return {"type": type(email).__name__, "to": email.to, "city": city, "at": at}


@handlers.handler("invoice.issue", payload_type=Invoice)
def issue(ctx: Context) -> dict[str, object]:
    invoice = ctx.payload
    assert isinstance(invoice, Invoice), type(invoice)
    return {"type": type(invoice).__name__, "number": invoice.number, "amount": invoice.amount}
