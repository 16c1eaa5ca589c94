"""Integrations with web frameworks: surfaces over the engine and the CLI, each behind an
optional extra (`fsm.contrib.django`: `jobfsm[django]`). Nothing below fsm.contrib imports
them, and each imports its framework only inside its own package."""
