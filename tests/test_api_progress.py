"""Progress bars: drawn on terminals only, silent under --quiet, no threads left behind."""

from __future__ import annotations

import io
import threading
import time

import pytest

from conftest import TtyStream
from planner import progress as prog




pytestmark = pytest.mark.usefixtures("progress_shown")


def test_silent_when_not_a_terminal():
    stream = io.StringIO()
    with prog.progress("solving", total=4, stream=stream) as bar:
        bar.advance(4)
    assert stream.getvalue() == ""


def test_draws_on_a_terminal():
    stream = TtyStream()
    with prog.progress("profiling", total=4, stream=stream) as bar:
        bar.advance(2)
        assert bar.render().startswith("profiling [" + "#" * 14 + "." * 14 + "]  50%")
        bar.advance(2)
    text = stream.getvalue()
    assert text.startswith("\rprofiling [") and text.endswith("\n") and "100%" in text


def test_quiet_switch_and_environment(monkeypatch):
    prog.set_quiet(True)
    assert not prog.enabled(TtyStream())
    prog.set_quiet(False)
    assert prog.enabled(TtyStream())
    monkeypatch.setenv("PPPLAN_QUIET", "1")
    assert not prog.enabled(TtyStream())


def test_clock_fills_with_elapsed_time_and_stops():
    stream = TtyStream()
    with prog.progress("solving", total=10, unit="s", clock=True, stream=stream) as bar:
        time.sleep(0.35)
        assert 0.2 < bar.done < 10
    assert stream.getvalue().count("\r") >= 2
    assert not any(t.name == "ppplan-progress" for t in threading.enumerate())


def test_cli_quiet_prints_nothing(tmp_path, capsys):
    from planner.cli import cli
    from planner.cli.common import run_guarded

    out = tmp_path / "plan.json"
    code = run_guarded(cli, ["plan", "llama3-8b", "--pp", "2", "--microbatches", "4", "--work", "2",
                             "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0 and captured.out == "" and captured.err == "" and out.exists()
