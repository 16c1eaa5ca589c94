"""`python -m fsm.cli`: the same as the `jobfsm` script."""

from __future__ import annotations

from . import main

if __name__ == "__main__":
    main()
