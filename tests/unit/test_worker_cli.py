"""`jobfsm worker`: --app references, queues, option checks, logging and the ready file."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsm.cli.apps import load_app
from fsm.cli.logsetup import JsonFormatter, TextFormatter, setup_logging
from fsm.cli.worker_cmd import ReadyFile, handler_queues, parse_queues
from fsm.errors import BadInput
from fsm.text import first_line, printable
from fsm.worker.handlers import Handlers


def jobfsm(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "fsm.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env=env,
    )


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (":handlers", "must look like 'package.module\\[:obj\\]'"),
        ("no.such.module:handlers", "cannot import 'no.such.module'.*current directory"),
        ("tests.integration.worker.app:nothing", "has no 'nothing'"),
        ("tests.integration.worker.app:mark", "is not a mapping"),
        ("tests.integration.worker", "has no 'handlers' \\(with no ':obj'"),
    ],
)
def test_a_bad_app_reference_is_refused_naming_it(ref: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        load_app(ref)


def test_an_app_reference_to_a_handlers_registry_loads_it() -> None:
    handlers = load_app("tests.integration.worker.app:handlers")

    assert {"noop", "sleep", "effect"} <= set(handlers)


def test_an_app_reference_without_an_object_means_its_handlers() -> None:
    assert set(load_app("tests.integration.worker.app")) == set(
        load_app("tests.integration.worker.app:handlers")
    )


def test_an_app_module_in_the_current_directory_is_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mysvc_cwd_probe").mkdir()
    (tmp_path / "mysvc_cwd_probe" / "__init__.py").write_text("")
    (tmp_path / "mysvc_cwd_probe" / "jobs.py").write_text("handlers = {'k': print}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])

    assert set(load_app("mysvc_cwd_probe.jobs")) == {"k"}


def test_an_app_whose_import_raises_is_named_in_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_app_probe.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)

    with pytest.raises(BadInput, match=r"importing 'broken_app_probe' failed.*no_such_dep"):
        load_app("broken_app_probe")


def test_the_queues_served_by_default_are_those_the_handlers_name() -> None:
    handlers = Handlers()
    handlers.register("mail.send", print, queue="mail")
    handlers.register("report.build", print)

    assert handler_queues(handlers) == {"mail": ["mail.send"], "default": ["report.build"]}
    assert handler_queues({"plain": print}) == {"default": ["plain"]}


@pytest.mark.parametrize("text", ["a b,'x", "a,", "ok,a\nb", " , "])
def test_queue_names_are_checked_by_the_engines_rule(text: str) -> None:
    if text == "a,":
        assert parse_queues(text) == ["a"]
        return
    with pytest.raises(BadInput, match="--queues"):
        parse_queues(text)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--lease-ttl", "0"),
        ("--heartbeat", "0"),
        ("--sweep-interval", "0"),
        ("--shutdown-grace", "0"),
        ("--lease-ttl", "-5"),
        ("--heartbeat", "nan"),
        ("--shutdown-grace", "inf"),
        ("--poll-interval", "0"),
        ("--cancel-grace", "-1"),
    ],
)
def test_a_zero_negative_or_non_finite_time_option_is_a_usage_error_naming_it(
    option: str, value: str, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    done = jobfsm(
        "worker", "--app", "tests.integration.worker.app", "--store", store, option, value
    )

    assert done.returncode == 2, done.stderr
    assert f"'{option}'" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_lease_ttl_below_twice_the_heartbeat_is_a_usage_error(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    done = jobfsm(
        *("worker", "--app", "tests.integration.worker.app", "--store", store),
        *("--lease-ttl", "2", "--heartbeat", "5"),
    )

    assert done.returncode == 2
    assert "--lease-ttl/--heartbeat" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unknown_log_level_is_a_usage_error_listing_the_choices(tmp_path: Path) -> None:
    done = jobfsm("worker", "--app", "x", "--log-level", "verbose")

    assert done.returncode == 2
    assert "'verbose' is not one of" in done.stderr
    assert "'debug'" in done.stderr.lower()
    assert "'warning'" in done.stderr.lower()


def test_a_worker_on_the_memory_store_is_refused() -> None:
    done = jobfsm("worker", "--app", "tests.integration.worker.app", "--store", "memory://")

    assert done.returncode == 2
    assert "'--store'" in done.stderr
    assert "private to one process" in done.stderr


def test_a_bad_queue_list_is_refused_on_the_command_line(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    done = jobfsm(
        "worker", "--app", "tests.integration.worker.app", "--store", store, "--queues", "a b,'x"
    )

    assert done.returncode == 2
    assert "--queues entry must be" in done.stderr
    assert not (tmp_path / "x.db").exists()


def test_the_command_line_reports_a_bad_app_in_one_line_and_exits_2(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    done = jobfsm("worker", "--app", "nope_no_such_module", "--store", store)

    assert done.returncode == 2
    assert "cannot import 'nope_no_such_module'" in done.stderr
    assert "Traceback" not in done.stderr


def test_worker_help_shows_the_concurrency_default_and_the_full_summaries() -> None:
    worker_help = jobfsm("worker", "--help").stdout
    top_help = jobfsm("--help").stdout

    assert "[default: " in worker_help.split("--concurrency", 1)[1].split("--executor", 1)[0]
    assert "..." not in top_help.split("Commands:", 1)[1]
    assert "killing them." in " ".join(top_help.split())


# --- logging ---------------------------------------------------------------------------


def _record(message: str, **fields: object) -> logging.LogRecord:
    record = logging.LogRecord("fsm.transitions", logging.INFO, __file__, 1, message, (), None)
    record.jobfsm = fields
    return record


def test_json_logs_are_one_object_per_line_with_the_structured_fields() -> None:
    line = JsonFormatter().format(
        _record(
            "job J succeed: running -> succeeded",
            job_id="J",
            kind="mail.send",
            event="succeed",
            fence=2,
            attempt=1,
            correlation_id="req-7",
        )
    )

    data = json.loads(line)
    assert "\n" not in line
    assert data["message"] == "job J succeed: running -> succeeded"
    assert data["level"] == "INFO"
    assert (data["job_id"], data["kind"], data["event"]) == ("J", "mail.send", "succeed")
    assert (data["fence"], data["attempt"], data["correlation_id"]) == (2, 1, "req-7")


def test_text_logs_shorten_owner_ids_and_escape_control_characters() -> None:
    owner = "vm:dd3cbe73-0ad2-4024-9970-0696a628e803:4026531836/pid 19707/ed549ea2"

    line = TextFormatter().format(_record(f"worker {owner} started \x1b[2J"))

    assert "worker vm:dd3cbe73/pid 19707/ed549ea2 started" in line
    assert "\x1b" not in line
    assert "\\x1b[2J" in line


def test_pika_records_are_off_unless_debug() -> None:
    # pika's chatter and its own records (with tracebacks) of failures jobfsm reports
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("pika").level)
    try:
        setup_logging("INFO", "text")
        assert logging.getLogger("pika").getEffectiveLevel() == logging.CRITICAL
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("pika").setLevel(saved[2])


# --- stored text -----------------------------------------------------------------------


def test_stored_text_is_escaped_for_the_terminal() -> None:
    assert printable("ok text") == "ok text"
    assert printable("red \x1b[31mX\x1b[0m") == "red \\x1b[31mX\\x1b[0m"
    assert printable("a\u202eb\rc\x00") == "a\\u202eb\\rc\\x00"
    assert printable("one\ntwo") == "one\\ntwo"
    assert printable("one\ntwo", keep="\n") == "one\ntwo"


def test_first_line_of_a_multi_line_error() -> None:
    text = "Traceback (most recent call last):\n  File x\nValueError: boom"

    assert first_line(text) == "Traceback (most recent call last): …"
    assert first_line("boom") == "boom"
    assert first_line(None) == ""
    assert first_line("x" * 100, 10) == "x" * 9 + " …"


# --- the ready file --------------------------------------------------------------------


class _FakeWorker:
    owner = "host/pid 1/abcdef12"
    ready = False


def _wait(cond: object, timeout: float = 5.0) -> bool:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_the_ready_file_follows_readiness_and_goes_on_exit(tmp_path: Path) -> None:
    path = tmp_path / "ready"
    path.write_text("left by a killed worker\n")
    fake = _FakeWorker()
    marker = ReadyFile(fake, path)  # type: ignore[arg-type]
    marker.start()
    try:
        assert _wait(lambda: not path.exists())  # stale file removed at start
        fake.ready = True
        assert _wait(path.exists)
        assert path.read_text() == "host/pid 1/abcdef12\n"
        fake.ready = False  # e.g. the store or the broker went away
        assert _wait(lambda: not path.exists())
        fake.ready = True
        assert _wait(path.exists)
    finally:
        marker.stop()
    assert not path.exists()


def test_the_ready_file_does_not_follow_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    path = tmp_path / "ready"
    fake = _FakeWorker()
    marker = ReadyFile(fake, path)  # type: ignore[arg-type]
    marker.start()
    path.symlink_to(target)  # planted after the start-up clean-up
    fake.ready = True
    try:
        time.sleep(0.6)
    finally:
        marker.stop()
    assert target.read_text() == "keep me\n"
    assert path.is_symlink()


def test_text_logs_of_transitions_name_the_kind_attempt_and_fence() -> None:
    line = TextFormatter().format(
        _record("job J succeed: running -> succeeded", kind="mail.send", attempt=2, fence=3)
    )

    assert line.endswith("job J succeed: running -> succeeded [mail.send attempt 2 fence 3]")


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("DEBUG", True)])
def test_leases_are_logged_at_debug(level: str, shown: bool) -> None:
    import io

    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("pika").level)
    try:
        setup_logging(level, "text")
        stream = io.StringIO()
        root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
        log = logging.getLogger("fsm.transitions")
        log.info("job J lease: queued -> leased", extra={"jobfsm": _fields("lease")})
        log.info("job J start: leased -> running", extra={"jobfsm": _fields("start")})
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("pika").setLevel(saved[2])

    out = stream.getvalue()
    assert "start: leased -> running" in out
    assert ("DEBUG fsm.transitions: job J lease" in out) is shown


def _fields(event: str) -> dict[str, object]:
    return {"event": event, "outcome": "applied", "kind": "k", "attempt": 0, "fence": 1}


def test_tables_never_hide_or_cut_ids_when_the_terminal_is_too_narrow(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fsm.display.terminal import PIPE_WIDTH, print_table

    kind = "k" * PIPE_WIDTH  # wider than the table may be
    print_table([["01M8SKCZ86BSTN5XVNR163RQRZ", kind, "err " * 80]], ["id", "kind", "error"])

    out = capsys.readouterr().out
    assert "01M8SKCZ86BSTN5XVNR163RQRZ" in out
    assert kind in out
    assert "error" in out.splitlines()[0]
