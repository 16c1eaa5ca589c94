"""The Django app `fsm.contrib.django` (label `jobfsm`): its management commands and
the staff page; it defines no models (the store's tables are jobfsm's own schema,
created by `manage.py jobfsm_migrate`)."""

from __future__ import annotations

from django.apps import AppConfig


class JobfsmConfig(AppConfig):
    name = "fsm.contrib.django"
    label = "jobfsm"
    verbose_name = "jobfsm"
