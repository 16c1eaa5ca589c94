"""Settings of the project docs/django.md's blocks run in (tests/docs/test_python_blocks.py):
the app `shop` with its `Order`, and jobfsm on the SQLite file SHOP_DB names."""

import os

SECRET_KEY = "docs-shop-tests-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "fsm.contrib.django",
    "shop",
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["SHOP_DB"]},
}
JOBFSM = {
    "HANDLERS": "shop.jobs:handlers",
    "KINDS": {"order.confirm": {"retry_safe": True, "max_attempts": 5}},
}
