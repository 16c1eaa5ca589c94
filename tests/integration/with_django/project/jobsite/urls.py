from django.urls import include, path

urlpatterns = [path("jobs/", include("fsm.contrib.django.urls"))]
