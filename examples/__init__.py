"""Small services that embed jobfsm (run them from the repository root)."""
