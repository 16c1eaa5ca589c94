"""`fsm.ports.LeasesServices` for the memory store: service leases in a dict behind its
lock (docs/retention.md)."""

from __future__ import annotations

import threading

from fsm.ports import ServiceLease


class MemoryServices:
    """Mixed into MemoryStore, which sets `_lock` and `_service_leases`."""

    _lock: threading.RLock
    _service_leases: dict[str, ServiceLease]

    def take_service_lease(self, name: str, owner: str, now: float, until: float) -> bool:
        with self._lock:
            held = self._service_leases.get(name)
            if held is not None and held.owner != owner and held.until > now:
                return False
            self._service_leases[name] = ServiceLease(name, owner, until)
            return True

    def release_service_lease(self, name: str, owner: str) -> bool:
        with self._lock:
            held = self._service_leases.get(name)
            if held is None or held.owner != owner:
                return False
            del self._service_leases[name]
            return True

    def service_leases(self) -> list[ServiceLease]:
        with self._lock:
            return [self._service_leases[n] for n in sorted(self._service_leases)]
