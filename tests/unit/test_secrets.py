"""The one URL redactor (fsm/secrets.py): what every caller needs of it.

PostgreSQL and AMQP URLs, passwords holding `@` `:` `/` `?` `#` or percent-escapes,
user info without a password, passwords in the query string, and libpq's reading of an
unencoded `@` (it ends the user info at the first `@` and sends the password's tail as
the host name, which its error then quotes).
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from fsm.secrets import MASK, redact_url, scrub, url_secrets

#: two halves of a password, each distinctive: neither may appear in any shown text
HEAD, TAIL = "Kq7Wz", "Xv3Jm"


def _leaks(text: str) -> list[str]:
    return [half for half in (HEAD, TAIL) if half.lower() in text.lower()]


@pytest.mark.parametrize("scheme", ["postgresql", "amqp"])
@pytest.mark.parametrize("between", ["@", ":", "/", "?", "#", "@:", "%40", "%zz", "&", ";"])
def test_a_password_holding_any_delimiter_is_masked_whole(scheme: str, between: str) -> None:
    # given a password whose two halves a delimiter (or a percent-escape) separates
    url = f"{scheme}://app:{HEAD}{between}{TAIL}@db.example:5432/jobs"
    # when the URL is shown, then neither half is
    shown = redact_url(url)
    assert _leaks(shown) == [], shown
    assert shown.startswith(f"{scheme}://")
    assert MASK in shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:pw@db:5432/jobs?schema=jobs", "postgresql://app:***@db:5432/jobs?schema=jobs"),
        ("amqp://guest:guest@127.0.0.1:5672/%2F", "amqp://guest:***@127.0.0.1:5672/%2F"),
        ("amqps://user:p%40ss@broker/vhost", "amqps://user:***@broker/vhost"),
        ("sqlite:///jobs.db?synchronous=NORMAL", "sqlite:///jobs.db?synchronous=NORMAL"),
        ("memory://", "memory://"),
    ],
)  # fmt: skip
def test_the_user_host_path_and_plain_options_stay_readable(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    ["amqp://guest@127.0.0.1:5672/%2F", "postgresql://app@db/jobs", "postgresql://app@/jobs"],
)
def test_user_info_without_a_password_is_shown_as_it_is(url: str) -> None:
    assert redact_url(url) == url
    assert url_secrets(url) == ()


@pytest.mark.parametrize(
    "query",
    [
        f"password={HEAD}{TAIL}",
        f"sslpassword={HEAD}{TAIL}&schema=jobs",
        f"schema=jobs&password={HEAD}&{TAIL}",  # an unescaped & in the password
        f"sslmode=require;password={HEAD};{TAIL}=x",  # ; as a separator (pika)
        f"token={quote(HEAD + '&' + TAIL, safe='')}",
        "ssl_options=" + quote('{"password": "' + HEAD + TAIL + '"}', safe=""),
    ],
)
def test_query_string_passwords_and_what_follows_them_are_masked(query: str) -> None:
    url = f"postgresql://app@db/jobs?{query}"
    shown = redact_url(url)
    assert _leaks(shown) == [], shown
    assert shown.startswith("postgresql://app@db/jobs?")
    # and a driver's message quoting any token of the query, or any word of a decoded
    # value, is scrubbed of it too
    tokens = re.split(r"[&;=]", query) + re.split(r"\W+", unquote(query))
    message = " ".join(f"bad option value '{token}'" for token in tokens)
    assert _leaks(scrub(message, url_secrets(url))) == [], message


def test_an_option_after_a_password_is_masked_by_name_and_value() -> None:
    shown = redact_url("postgresql://app@db/jobs?schema=jobs&password=pw&cont&pool_max=5")
    assert shown == "postgresql://app@db/jobs?schema=jobs&password=***&***&***=***"


def test_options_an_adapter_does_not_know_or_call_plain_are_masked() -> None:
    # given the options RabbitMQ declares: known names, numbers shown for numeric ones
    known = frozenset({"heartbeat", "ssl_options"})

    def plain(name: str, value: str) -> bool:
        return name == "heartbeat" and value.isdigit()

    url = "amqp://g:pw@h/%2F?heartbeat=30&ssl_options=certs&mystery=1#frag"
    # then only those are shown; the fragment never is
    shown = redact_url(url, known=known, plain=plain)
    assert shown == "amqp://g:***@h/%2F?heartbeat=30&ssl_options=***&***=***#***"
    assert {"certs", "mystery", "frag"} <= set(url_secrets(url, known=known, plain=plain))


def test_a_value_that_is_no_url_is_not_shown_at_all() -> None:
    assert redact_url(f"app:{HEAD}@db/jobs") == "<a value without 'scheme://', not shown>"
    assert redact_url(b"postgresql://app:pw@db") == "<a bytes, not a URL>"
    assert HEAD in url_secrets(f"app:{HEAD}@db")
    assert url_secrets(None) == ()


# --- libpq reads an unencoded `@` differently ----------------------------------------


@pytest.mark.parametrize(
    "password", [f"{HEAD}@{TAIL}", f"{HEAD}@{TAIL}:5432", f"{HEAD}@{TAIL}@x", f"{HEAD}:@{TAIL}"]
)
def test_every_value_libpq_reads_out_of_an_unencoded_at_is_scrubbed(password: str) -> None:
    # given a URL whose password holds an unencoded `@`: libpq ends the user info at the
    # first `@` and reads the rest of the password as the host (and perhaps the port)
    url = f"postgresql://app:{password}@127.0.0.1:5432/jobs"
    params = conninfo_to_dict(url)
    assert params["password"] != password  # libpq's reading, not the user's
    # when a driver message quotes any value libpq took from the URL
    secrets = url_secrets(url)
    for name, value in params.items():
        message = f'invalid {name}: "{value}" (could not translate host name "{value}")'
        # then no half of the password survives, nor the URL's redaction
        assert _leaks(scrub(message, secrets)) == [], (name, value)
    assert _leaks(redact_url(url)) == []


def test_a_connect_error_of_libpq_quoting_the_password_tail_is_scrubbed() -> None:
    # given the case of issue 32 item 15: `app:head@tail@host`, which libpq sends to the
    # host "tail@127.0.0.1" (a name no resolver knows: the error comes without a server)
    url = f"postgresql://app:{HEAD}@{TAIL}@127.0.0.1:5432/jobs?connect_timeout=2"
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(url).close()
    assert TAIL in str(caught.value)  # the leak the scrub must stop
    # when the error text is scrubbed with the URL's secrets, then the tail is gone
    assert _leaks(scrub(str(caught.value), url_secrets(url))) == []


def test_short_secrets_are_masked_only_where_they_stand_alone() -> None:
    text = "failed to resolve host 'ss': address ss1 unknown (pass ss)"
    assert scrub(text, ["ss"]) == "failed to resolve host '***': address ss1 unknown (pass ***)"


def test_scrub_masks_the_longest_secret_first_in_any_case() -> None:
    assert scrub("x Kq7Wz@Xv3Jm y kq7wz", ["Kq7Wz", "Kq7Wz@Xv3Jm"]) == "x *** y ***"


# --- any password ----------------------------------------------------------------------

MARK_START, MARK_END = "ZQXW", "WXQZ"


@given(
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=16),
    scheme=st.sampled_from(["postgresql", "amqp", "sqlite"]),
    where=st.sampled_from(["userinfo", "query", "fragment", "after"]),
    encode=st.booleans(),
)
def test_no_password_of_any_characters_survives_redaction(
    text: str, scheme: str, where: str, encode: bool
) -> None:
    password = f"{MARK_START}{text}{MARK_END}"
    secret = quote(password, safe="") if encode else password
    url = {
        "userinfo": f"{scheme}://app:{secret}@db:5432/jobs?schema=jobs",
        "query": f"{scheme}://app@db/jobs?password={secret}",
        "fragment": f"{scheme}://app@db/jobs#{secret}",
        "after": f"{scheme}://app@db/jobs?schema=x&pass={secret}&pool_max=5",
    }[where]
    shown = redact_url(url)
    scrubbed = scrub(f"error near '{password}' and '{secret}'", url_secrets(url))
    for marker in (MARK_START, MARK_END):
        assert not re.search(marker, shown, re.IGNORECASE), shown
        assert not re.search(marker, scrubbed, re.IGNORECASE), scrubbed


def test_a_password_holding_a_slash_then_a_hash_or_a_question_mark_is_masked() -> None:
    # found by the property above when it drew "/#": the `#` after a `/` was read as the
    # start of the fragment, so no reading's password ended at the `@`, and its first
    # part was shown
    for text in ("/#", "/?", "/#?", "/?#", "/#@", "/?@"):
        password = f"{MARK_START}{text}{MARK_END}"
        for url in (
            f"postgresql://app:{password}@db:5432/jobs?schema=jobs",
            f"postgresql://app:{password}@db/x",
        ):
            shown = redact_url(url)
            scrubbed = scrub(f"error near '{password}'", url_secrets(url))
            for marker in (MARK_START, MARK_END):
                assert marker not in shown, (url, shown)
                assert marker not in scrubbed, (url, scrubbed)


def test_an_at_sign_in_an_option_value_leaves_the_host_shown() -> None:
    url = "postgresql://app:pw@db/x?application_name=me@host"
    assert redact_url(url) == "postgresql://app:***@db/x?application_name=me@host"
