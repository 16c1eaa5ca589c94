"""The environment a process executor's child keeps: an allow-list, everything else removed.

A worker's environment often holds its credentials (`JOBFSM_STORE`, `PGPASSWORD`, an
AMQP URL with its password). A handler needs none of them, so a child removes every
variable the allow-list does not name before it imports any handler or runs its
`child_init`: from `os.environ` (and so from `os.environb` and `posix.environ`, which
share its data), from the C library's `environ` (so `getenv` in a C extension, libpq
for one, no longer finds it), and from the bytes of the process's start-up
environment, which are overwritten with zeros (so `/proc/self/environ` no longer shows
it either).

The allow-list: DEFAULT_CHILD_ENV, plus the names a `ProcessExecutor(child_env=...)`
and the variable JOBFSM_CHILD_ENV (comma-separated) add; `*` and `?` match as in shell
patterns (`LC_*`), and `*` alone keeps everything. What this does not change: a child
runs as the worker's OS user, so it can read what that user can (docs/workers.md,
"What a handler in a child can reach").
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import os
from collections.abc import Iterable

#: Variables a child keeps by default: where programs and temporary files are, the
#: user, the locale and time zone, the terminal, Python's own settings.
DEFAULT_CHILD_ENV: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TERM",
    "PYTHON*",
    "VIRTUAL_ENV",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
#: Extra names (comma-separated) a child keeps, for a worker started from the CLI.
CHILD_ENV_VAR = "JOBFSM_CHILD_ENV"


def child_allow_list(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The patterns a child keeps: the defaults, `extra`, and JOBFSM_CHILD_ENV's names.

    Read in the worker (whose environment the children start from)."""
    from_env = [n.strip() for n in os.environ.get(CHILD_ENV_VAR, "").split(",")]
    names = [*DEFAULT_CHILD_ENV, *extra, *(n for n in from_env if n)]
    for name in names:
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"child environment: {name!r} is not a variable name or pattern")
    return tuple(dict.fromkeys(names))


def kept(name: str, allow: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in allow)


def scrub_environment(allow: Iterable[str]) -> list[str]:
    """Remove from this process every variable `allow` does not name; returns their names.

    Call it first thing in a child, before a handler module is imported."""
    allow = tuple(allow)
    removed = [name for name in os.environ if not kept(name, allow)]
    if not removed:
        return []
    wipe = _startup_strings(set(removed))
    for name in removed:
        del os.environ[name]  # unsetenv too
    for address, size in wipe:
        ctypes.memset(address, 0, size)
    return removed


def _startup_strings(names: set[str]) -> list[tuple[int, int]]:
    """(address, length) of the C `environ` entries "NAME=value" of `names` (Linux, glibc
    or musl; elsewhere nothing: the variables are still removed, only not zeroed)."""
    found: list[tuple[int, int]] = []
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None)
        env = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
        i = 0
        while env[i]:
            address = int(env[i] or 0)
            entry = ctypes.string_at(address)
            name = entry.split(b"=", 1)[0].decode("utf-8", "surrogateescape")
            if name in names:
                found.append((address, len(entry)))
            i += 1
    return found
