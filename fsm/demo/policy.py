"""The demo's policy: the library defaults scaled down so a demo takes seconds, not hours."""

from __future__ import annotations

from ..policies import Backoff, LeasePolicy, Policy, RecoveryPolicy, RetryPolicy

#: lease TTL and heartbeat (the library defaults are 30 s and 5 s)
LEASE_TTL = 3.0
HEARTBEAT = 0.5
#: retry backoff: 0.1 s x 2^n, capped at 1 s, full jitter (defaults: 1 s, capped at 1 h)
BACKOFF = Backoff(base=0.1, factor=2.0, cap=1.0)
#: recovery sweep every 0.3 s (default 1 s); recovery budget as the default (3)
SWEEP_INTERVAL = 0.3


def demo_policy(seed: int) -> Policy:
    return Policy(
        retry=RetryPolicy(max_attempts=6, backoff=BACKOFF),
        lease=LeasePolicy(ttl=LEASE_TTL, heartbeat_interval=HEARTBEAT),
        recovery=RecoveryPolicy(max_recoveries=3, sweep_interval=SWEEP_INTERVAL),
        seed=seed,
    )
