"""Progress off a terminal comes as a line per phase with the best so far; on a terminal the
bar names the phase once."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import TtyStream
from planner import progress as prog




pytestmark = pytest.mark.usefixtures("progress_shown")


def test_a_line_per_phase_with_the_best_so_far(monkeypatch):
    monkeypatch.setattr(prog, "LINES_AFTER_S", 0.0)
    stream = io.StringIO()
    with prog.progress("planning m", total=10, unit="s", clock=True, stream=stream):
        prog.phase("screening")
        prog.note("screening 9/9, best 1.25 s")
        prog.phase("polish")
    lines = stream.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["planning m: screening", "planning m: polish",
                                                        "planning m: done"], lines
    assert lines[1].endswith("; screening 9/9, best 1.25 s)"), lines[1]
    assert "\r" not in stream.getvalue()


def test_no_done_line_after_an_error(monkeypatch):
    monkeypatch.setattr(prog, "LINES_AFTER_S", 0.0)
    stream = io.StringIO()
    with pytest.raises(KeyError), prog.progress("planning m", total=10, stream=stream):
        prog.phase("screening")
        raise KeyError("x")
    assert stream.getvalue().splitlines()[-1].startswith("planning m: screening ("), stream.getvalue()


def test_no_lines_for_a_short_run_or_when_quiet(monkeypatch):
    stream = io.StringIO()
    with prog.progress("planning m", total=10, stream=stream):
        prog.phase("screening")
    assert stream.getvalue() == ""
    monkeypatch.setattr(prog, "LINES_AFTER_S", 0.0)
    prog.set_quiet(True)
    with prog.progress("planning m", total=10, stream=stream):
        prog.phase("screening")
    assert stream.getvalue() == ""


def test_long_phase_gets_a_heartbeat(monkeypatch):
    monkeypatch.setattr(prog, "LINES_AFTER_S", 0.0)
    monkeypatch.setattr(prog, "HEARTBEAT_S", 0.0)
    stream = io.StringIO()
    with prog.progress("profiling", total=4, stream=stream) as bar:
        prog.phase("measured gqa")
        bar.advance()
    assert stream.getvalue().splitlines()[1].startswith("profiling: measured gqa ("), stream.getvalue()


def test_bar_names_the_phase_once():
    with prog.progress("planning m", total=10, stream=TtyStream()) as bar:
        prog.phase("screening")
        prog.note("screening 1/9, best 1.25 s")
        assert bar.render().count("screening") == 1, bar.render()
        assert bar.render().endswith("s  screening 1/9, best 1.25 s")
        prog.phase("polish")
        assert bar.render().endswith("s  polish  screening 1/9, best 1.25 s")


def test_cli_plan_prints_phase_lines(tmp_path, capsys, monkeypatch):
    from planner.cli import cli
    from planner.cli.common import run_guarded

    monkeypatch.setattr(prog, "LINES_AFTER_S", 0.0)
    code = run_guarded(cli, ["plan", "llama3-8b", "--pp", "2", "--microbatches", "4", "--work", "1",
                             "--out", str(tmp_path / "plan.json")])
    err = capsys.readouterr().err.splitlines()
    assert code == 0, err
    assert any(": screening (" in line for line in err) and err[-1].startswith("planning llama3-8b"), err
    assert any("best " in line for line in err), err


def test_every_option_has_help():
    from planner.cli import cli

    missing = [f"{name} {p.opts[0]}" for name, cmd in cli.commands.items() for p in cmd.params
               if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()]
    assert missing == []


def test_gpu_help_lists_every_preset(ppplan):
    from planner.core.hardware import GPU_PRESETS

    block = " ".join(ppplan("plan", "--help").out.split("--gpu GPU", 1)[1].split("\n  --", 1)[0].split())
    assert all(name in block.replace(", ", " ").replace(".", " ").split() for name in GPU_PRESETS), block
    assert "b200" in block and "gb200" in block


@pytest.mark.parametrize("text, library, warned", [("4microbatches", "4mb", False), ("2.5 Microbatch", "2.5mb", False),
                                                   ("4mb", "4mb", True), ("80GiB", "80GiB", False)])
def test_memory_limit_spelling(capsys, text, library, warned):
    from planner.cli.plan_options import MemoryLimit

    assert MemoryLimit().convert(text, None, None) == library
    err = capsys.readouterr().err
    assert (err.startswith("warning: --memory-limit 4mb: the unit mb is deprecated") and err.count("\n") == 1) \
        if warned else err == "", err


def test_memory_limit_below_one_microbatch(ppplan):
    new, old = (ppplan("plan", "llama3-8b", "--memory-limit", text, "--quiet") for text in ("0.5microbatches", "0.5mb"))
    assert new.code == old.code == 2
    assert new.err.count("\n") == 1 and "'0.5microbatches' is below one microbatch" in new.err, new.err
    assert old.err.count("\n") == 1 and "'0.5mb' is below one microbatch" in old.err, old.err


def test_old_memory_limit_spelling_still_plans(ppplan):
    example = Path(__file__).resolve().parent.parent / "examples" / "costs" / "four_stages.json"
    old = ppplan("plan", "--profile", str(example), "--pp", "4", "--microbatches", "12", "--memory-limit", "4mb",
                 "--quiet", "--json", "--out", "old.json")
    new = ppplan("plan", "--profile", str(example), "--pp", "4", "--microbatches", "12", "--memory-limit",
                 "4microbatches", "--quiet", "--json", "--out", "new.json")
    assert old.code == new.code == 0, (old.err, new.err)
    assert "deprecated" in old.err and new.err == ""
    assert json.loads(old.out)["schedule"] == json.loads(new.out)["schedule"]


def test_degree_table_is_aligned():
    from planner.cli.degrees_table import degrees_text

    rows = [{"rank": 1, "tp": 1, "pp": 4, "vpp": 2, "ep": 1, "cp": 1, "dp": 16, "mbs": 1, "recompute": "none",
             "ep_overlap": False, "tokens_per_s_per_gpu": 12345.6, "mfu": 0.4123, "peak_memory_gib": 61.2},
            {"rank": 10, "tp": 8, "pp": 16, "vpp": 1, "ep": 1, "cp": 1, "dp": 1, "mbs": 2, "recompute": "selective",
             "ep_overlap": True, "tokens_per_s_per_gpu": 999.1, "mfu": 0.05, "peak_memory_gib": 7.25}]
    screen = {"screened": 90, "candidates": 100, "work_cut": True, "wall_cut": False, "wall_s": 1.2}
    text = degrees_text({"gpus": 64, "screen": screen, "table": rows, "fully_planned": [], "why": "x"})
    table = text.splitlines()[1:4]
    assert len({len(line) for line in table}) == 1, table
    for column in ("recompute", "mfu", "peak_memory_gib"):
        header_end = table[0].index(column) + len(column)
        assert all(line[header_end - 1] != " " for line in table if column != "recompute"), table


def test_replan_prints_half_open_ranges(tmp_path):
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, "-m", "planner.cli", "replan",
                          str(root / "plans" / "examples" / "qwen3-next-80b-a3b.default.plan.json"),
                          "--routing", str(root / "examples" / "routing" / "hot_late.jsonl"),
                          "--out", str(tmp_path / "new.json")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    stages = next(line for line in run.stdout.splitlines() if line.startswith("stages "))
    assert re.fullmatch(r"stages\s+(\[\d+,\d+\) ?)+", stages), stages
    assert not re.search(r"\[\d+, \d+\]", run.stdout), run.stdout


def test_make_traces_says_what_it_wrote(tmp_path, capsys):
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "examples" / "routing" / "make_traces.py"
    spec = importlib.util.spec_from_file_location("make_traces_usability", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.startswith(f"wrote 5 traces to {tmp_path}: start.json") and "drift.jsonl" in out


def test_old_memory_limit_spelling_on_a_refused_plan_prints_one_line(ppplan):
    """The deprecation line waits for success: a refused command prints its one error line only."""
    res = ppplan("plan", "llama3-8b", "--microbatches", "5", "--memory-limit", "3mb", "--quiet")
    assert res.code == 2 and res.err.count("\n") == 1 and res.err.startswith("error: --microbatches"), res.err


def test_printed_json_is_as_strict_as_a_written_file():
    """``--json`` output with a NaN would not parse: it is refused as a bug, not printed."""
    from planner.cli.common import echo_json
    from planner.core.jsonio import UnreadableOutput

    with pytest.raises(UnreadableOutput):
        echo_json({"step_time_s": float("nan")})
