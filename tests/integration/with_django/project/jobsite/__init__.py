"""A small Django project that uses jobfsm (tests/integration/with_django)."""
