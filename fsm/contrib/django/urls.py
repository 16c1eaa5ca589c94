"""`path("jobs/", include("fsm.contrib.django.urls"))`: the staff page (`views.overview`)."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "jobfsm"
urlpatterns = [path("", views.overview, name="overview")]
