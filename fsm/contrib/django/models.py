"""No models: jobfsm's tables are the store's own schema (apps.py). The module exists
because Django sends `post_migrate` only to apps that have one."""
