"""A staff page: the jobs of the store by queue and state, and a link to the jobfsm
dashboard (JOBFSM['DASHBOARD_URL']), where jobs are inspected and operated on."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import user_passes_test
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join

from ...secrets import redact_url
from . import get_engine
from .conf import config

#: the page, filled with format_html (every value escaped)
PAGE = (
    "<!doctype html><html><head><title>jobfsm</title></head><body>"
    "<h1>jobfsm jobs</h1><p>store: {}</p>{}"
    "<table><thead><tr><th>queue</th><th>state</th><th>jobs</th></tr></thead>"
    "<tbody>{}</tbody></table></body></html>"
)


def is_staff(user: Any) -> bool:
    """An active staff user (the user model's `is_staff`, as the admin's own check)."""
    return bool(user.is_active and getattr(user, "is_staff", False))


@user_passes_test(is_staff)
def overview(request: HttpRequest) -> HttpResponse:
    """Counts by (queue, state), read from the store; active staff users only (others
    are sent to the login page)."""
    cfg = config()
    counts = sorted(get_engine().counts().items())
    rows = format_html_join(
        "", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", ((q, s, n) for (q, s), n in counts)
    )
    link = (
        format_html('<p><a href="{}">Open the jobfsm dashboard</a></p>', cfg.dashboard_url)
        if cfg.dashboard_url
        else format_html(
            "<p>No dashboard linked: run <code>jobfsm dashboard</code> and set "
            "JOBFSM['DASHBOARD_URL'].</p>"
        )
    )
    return HttpResponse(format_html(PAGE, redact_url(cfg.store), link, rows))
