"""Settings of the test project. The databases come from the environment, which the
tests' conftest sets before Django starts (and a worker process inherits):

- JOBSITE_SQLITE / JOBSITE_SQLITE_TEST: the SQLite file of alias "default" and its test
  database (Django's test runner creates and deletes the latter);
- JOBSITE_PG / JOBSITE_PG_TEST: the PostgreSQL database of alias "pg" and its test database;
- JOBSITE_PG_HOST, JOBSITE_PG_PORT, JOBSITE_PG_USER: where PostgreSQL runs;
- JOBSITE_DATABASE: the alias jobfsm submits on ("default").
"""

import os

SECRET_KEY = "jobsite-tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["testserver"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "jobsite.urls"
LOGIN_URL = "/login/"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "fsm.contrib.django",
    "jobsite",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["JOBSITE_SQLITE"],
        "TEST": {"NAME": os.environ.get("JOBSITE_SQLITE_TEST")},
    },
    "pg": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["JOBSITE_PG"],
        "USER": os.environ.get("JOBSITE_PG_USER", "postgres"),
        "HOST": os.environ.get("JOBSITE_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("JOBSITE_PG_PORT", "5432"),
        "TEST": {"NAME": os.environ.get("JOBSITE_PG_TEST"), "DEPENDENCIES": []},
    },
}
JOBFSM = {
    "DATABASE": os.environ.get("JOBSITE_DATABASE", "default"),
    "HANDLERS": "jobsite.jobs:handlers",
    "KINDS": {"order.confirm": {"retry_safe": True, "max_attempts": 3}},
    "WORKER_ARGS": ["--poll-interval", "0.2", "--concurrency", "2"],
    "DASHBOARD_URL": "http://127.0.0.1:8080/",
    "CHILD_ENV": ["JOBSITE_*"],  # what this file reads: process-executor children keep it
}
