"""The project's handlers (JOBFSM['HANDLERS'] = "jobsite.jobs:handlers"): they run in
`manage.py jobfsm_worker`, where Django is set up, so they use the ORM."""

from typing import Any

from django.db import close_old_connections

from fsm import Context, Handlers
from fsm.contrib.django import config
from jobsite.models import Order

handlers = Handlers()


@handlers.handler("order.confirm", retry_safe=True)
def confirm(ctx: Context) -> dict[str, Any]:
    try:
        Order.objects.using(config().database).filter(pk=ctx.payload["order"]).update(
            confirmed=True
        )
        return {"confirmed": ctx.payload["order"]}
    finally:
        close_old_connections()  # as Django does at the end of a request
