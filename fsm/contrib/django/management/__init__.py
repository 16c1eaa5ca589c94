"""Django's management commands of the jobfsm app (`manage.py jobfsm_worker`,
`manage.py jobfsm_migrate`)."""
