"""Public test helpers (extra jobfsm[testing]).

The store conformance suite and the hypothesis fault suites live here.
"""
