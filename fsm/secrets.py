"""Keep secrets out of error messages, logs and reprs: the one URL redactor.

Every adapter that puts a URL (or a driver's error text, which may quote one) into a
message passes it through here first. `redact_url(url)` is the URL fit to show;
`url_secrets(url)` is every piece of it that no message may show, and `scrub(text,
secrets)` masks those pieces in any text. None of them fails or returns a password.

What is secret:

- the password of the user info, however a parser reads it. Python and pika end the
  user info at the last `@` of the host part, libpq at the first `@` (sending the rest
  of the password as the host name, which its error then quotes), and a password
  holding an unescaped `/`, `?` or `#` moves those ends again. Every reading's password
  is secret, and so is every token a parser could cut from it (`ss@host` of
  `user:p@ss@host`) and every word of it, percent-decoded or not;
- query values whose option name looks like a secret (`password`, `sslpassword`,
  `token`, ...), and every option after one: a password holding an unescaped `&` or `;`
  goes on there. Options are split at both, as pika splits them. An adapter that knows
  its options passes `known` (names that may be shown) and `plain` (which values may be
  shown); any other name or value is masked;
- the fragment, and the whole of a value without `scheme://` (its password may be
  anywhere).

Secrets shorter than three characters are masked only where they stand alone (not
inside a word), so a one-letter password does not turn a message into asterisks.
Masking is case-insensitive. Over-masking is harmless: a URL with an `@` in a query
value has its host masked in error texts too.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Iterable
from typing import NamedTuple
from urllib.parse import unquote, unquote_plus

MASK = "***"
#: option names that carry secrets (libpq's `password` and `sslpassword`, and anything
#: else named like a password, a secret, a token or a credential)
SECRET_NAME = re.compile(r"pass|secret|token|credential", re.IGNORECASE)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
#: what a generic option name looks like (anything else may be a piece of a password)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
#: where URL parsers cut a URL into tokens (`,` separates libpq's hosts)
_DELIMITERS = frozenset("@:/?#&;=,[]")
_DELIMITER = re.compile(r"[@:/?#&;=,\[\]]")
_NON_WORD = re.compile(r"[\W_]+")
#: secrets shorter than this are masked only as whole tokens
_SHORT = 3
#: cut points considered on each side of a password (bounds the work on a hostile URL)
_MOST_CUTS = 16

#: a URL inside free text (an exception's message): `scheme://` up to a space or a quote
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
#: URLs of one text whose secrets `scrub_urls` masks (bounds the work on a hostile text)
_MOST_URLS = 16

#: `plain(name, value)`: may this option's value be shown?
Plain = Callable[[str, str], bool]


class UrlParts(NamedTuple):
    """A URL's parts as written (nothing decoded); None where the URL has no such part.

    The fragment starts at the first `#`, the query at the first `?` before it, and the
    user info ends at the last `@` before the query: a password holding an unescaped
    `/` or `@` stays in the user info (a host shown masked is harmless)."""

    scheme: str
    userinfo: str | None
    host_and_path: str
    query: str | None
    fragment: str | None


def split_url(url: str) -> UrlParts | None:
    """The parts of `scheme://userinfo@host/path?query#fragment`; None without `scheme://`."""
    scheme, sep, rest = url.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return None
    rest, hash_, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    userinfo, at, host_and_path = rest.rpartition("@")
    return UrlParts(
        scheme,
        userinfo if at else None,
        host_and_path,
        query if question else None,
        fragment if hash_ else None,
    )


def query_pairs(query: str) -> list[tuple[str, str, str]]:
    """(name, `=` or ``, value) of each option, split at `&` and at `;`; empty ones left out."""
    return [part.partition("=") for part in re.split(r"[&;]", query) if part]


class _Option(NamedTuple):
    name: str
    eq: str
    value: str
    name_shown: bool
    value_shown: bool


def _options(query: str, known: Collection[str] | None, plain: Plain | None) -> list[_Option]:
    """Each option of `query` with what of it may be shown."""
    out: list[_Option] = []
    tainted = False  # after a secret (or a name that is no name), everything is masked
    for name, eq, value in query_pairs(query):
        bare = unquote(name)
        if known is None:
            name_ok = bool(eq) and _NAME.fullmatch(bare) is not None
        else:
            name_ok = bare.lower() in known
        name_ok = name_ok and not tainted
        secret = SECRET_NAME.search(bare) is not None
        if plain is None:  # a value that names a secret holds one (`ssl_options={"password":..`)
            value_ok = name_ok and not secret and SECRET_NAME.search(unquote_plus(value)) is None
        else:
            value_ok = name_ok and not secret and plain(bare, value)
        tainted = tainted or secret or not name_ok
        out.append(_Option(name, eq, value, name_ok, value_ok))
    return out


def redact_url(
    url: object, *, known: Collection[str] | None = None, plain: Plain | None = None
) -> str:
    """`url` fit for errors, logs and reprs: its user name, host, path and the option
    names and values it may show; every secret (see the module) as `***`.

    A value that is not a string, or has no `scheme://`, is not shown at all.
    """
    if not isinstance(url, str):
        return f"<a {type(url).__name__}, not a URL>"
    parts = split_url(url)
    if parts is None:
        return "<a value without 'scheme://', not shown>"
    user = ""
    if parts.userinfo is not None:
        name, colon, _password = parts.userinfo.partition(":")
        user = f"{name}:{MASK}@" if colon else f"{name}@"
    tail = parts.host_and_path
    if parts.query is not None:
        shown = [
            f"{o.name if o.name_shown else MASK}{o.eq}"
            f"{o.value if o.value_shown else (MASK if o.eq else '')}"
            for o in _options(parts.query, known, plain)
        ]
        tail += "?" + "&".join(shown)
    if parts.fragment:
        tail += "#" + MASK
    # the rest is scrubbed too, for what another reading of the user info calls its
    # password (the user name is not: it may equal the password, and it is shown on
    # purpose; the query and fragment are masked above, by their structure)
    return f"{parts.scheme}://{user}{scrub(tail, _password_secrets(url))}"


def url_secrets(
    url: object, *, known: Collection[str] | None = None, plain: Plain | None = None
) -> tuple[str, ...]:
    """Every piece of `url` no message may show (see the module), raw and percent-decoded,
    longest first: what `scrub` takes. `known` and `plain` as for `redact_url`."""
    if not isinstance(url, str):
        return ()
    parts = split_url(url)
    if parts is None:
        return _decoded(_with_pieces([url]))
    hidden: list[str] = []
    if parts.query is not None:
        for o in _options(parts.query, known, plain):
            hidden += [] if o.name_shown else [o.name]
            hidden += [] if o.value_shown else [o.value]
    if parts.fragment:
        hidden.append(parts.fragment)
    return _decoded([*_password_secrets(url), *_with_pieces(hidden)])


def _password_secrets(url: str) -> list[str]:
    """The secrets of the user info: the tokens a parser could cut from each reading of
    the password (`_cuts`: not split again, or `ss@host` would make the host secret),
    and the words of each password."""
    rest = url.partition("://")[2]
    spans = _password_spans(rest)
    cuts = [cut for start, end in spans for cut in _cuts(rest, start, end)]
    return cuts + _words([rest[start:end] for start, end in spans])


def _password_spans(rest: str) -> list[tuple[int, int]]:
    """(start, end) in `rest` (the URL after `://`) of the password of each reading of
    the user info: up to any `@` before the first `/` (libpq ends it at the first, and
    Python and pika at the last before a `/`, `?` or `#`; a password holding `?` or `#`
    moves the last), up to the last `@` before the query (a password holding `/`, or `/`
    then `#`), and up to the last `@` of the query's text before its first `=` (a
    password holding `/` then `?`). An `@` in an option's value is the value's
    (`application_name=me@host`)."""
    slash = rest.find("/")
    ends = {i for i, c in enumerate(rest[: len(rest) if slash == -1 else slash]) if c == "@"}
    ends = set(sorted(ends)[:_MOST_CUTS])
    before, question, query = rest.partition("?")
    ends.add(before.partition("#")[0].rfind("@"))
    ends.add(before.rfind("@"))
    named = query.partition("=")[0].rfind("@")
    if question and named != -1:
        ends.add(len(before) + 1 + named)
    spans = []
    for end in sorted(ends - {-1}):
        colon = rest.find(":", 0, end)
        if colon != -1 and colon + 1 < end:
            spans.append((colon + 1, end))
    return spans


def _cuts(rest: str, start: int, end: int) -> list[str]:
    """Every token a parser could cut from `rest` that holds a piece of the password at
    rest[start:end]: from the beginning, the password's start or a delimiter inside it,
    to a delimiter (or the end) past that point."""
    firsts = [0, start] + [k + 1 for k in range(start, end) if rest[k] in _DELIMITERS]
    lasts = [m.start() for m in _DELIMITER.finditer(rest, start + 1)][:_MOST_CUTS]
    lasts.append(len(rest))
    return [
        rest[first:last]
        for first in firsts[: _MOST_CUTS + 2]
        for last in lasts
        if last > max(first, start)
    ]


def _with_pieces(values: Iterable[str]) -> list[str]:
    """`values`, their pieces between delimiters (a parser may cut a value there) and
    their words (a driver may quote a word of a value it decoded)."""
    values = list(values)
    return [
        *(piece for value in values for piece in (value, *_DELIMITER.split(value))),
        *_words(values),
    ]


def _words(values: Iterable[str]) -> list[str]:
    """The runs of letters and digits of `values`, raw and percent-decoded, of at least
    three characters (a shorter one alone is no secret worth asterisks everywhere)."""
    return [
        word
        for value in values
        for form in (value, unquote(value), unquote_plus(value))
        for word in _NON_WORD.split(form)
        if len(word) >= _SHORT
    ]


def _decoded(values: Iterable[str]) -> tuple[str, ...]:
    """`values` raw and percent-decoded (with `+` as a space or not), longest first."""
    out: set[str] = set()
    for value in values:
        out.update((value, unquote(value), unquote_plus(value)))
    out.discard("")
    return tuple(sorted(out, key=lambda s: (-len(s), s)))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret masked (a driver's error text): any case, longest first;
    a secret shorter than three characters only where it stands alone."""
    pattern = _pattern(tuple(secrets))
    return text if pattern is None else pattern.sub(MASK, text)


def scrub_urls(text: str) -> str:
    """`text` (an error a handler or a driver raised) with the secrets of every URL in it
    masked, as `url_secrets` finds them (the first 16 URLs): for text that leaves the
    process (a span's status) when the URL it may quote is not known."""
    found = [m.group() for m in _URL_IN_TEXT.finditer(text)][:_MOST_URLS]
    return scrub(text, [secret for url in found for secret in url_secrets(url)])


@functools.lru_cache(maxsize=64)  # a store or broker scrubs its errors with one set
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    alternatives = []
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        escaped = re.escape(secret)
        if len(secret) < _SHORT:
            escaped = rf"(?<![^\W_]){escaped}(?![^\W_])"
        alternatives.append(escaped)
    return re.compile("|".join(alternatives), re.IGNORECASE) if alternatives else None
