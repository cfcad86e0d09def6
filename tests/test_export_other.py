"""DeepSpeed and trace exports, and the ``ppplan export`` command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner.cli import cli
from planner.cli.common import run_guarded
from planner.export import DEFAULT_OUT, FORMATS, ExportError, export_plan
from planner.export.deepspeed import deepspeed_parts
from planner.export.trace import chrome_trace
from test_export_plans import CASES, case_plan


@pytest.mark.parametrize("name", ["uniform", "uneven", "w_adjacent"])
def test_deepspeed_parts_are_the_stage_bounds(name):
    plan = case_plan(name)
    parts = deepspeed_parts(plan)
    assert parts == [a for a, _ in plan.bounds()] + [plan.model["num_layers"]]


@pytest.mark.parametrize("name, match", [
    ("vpp2", r"the plan uses 2 stages per rank; DeepSpeed's PipelineModule holds one stage per rank"),
    ("v", r"the plan uses V placement"),
    ("custom", r"the plan uses stage-to-rank map \[1, 0\]"),
    ("fused", r"OVERLAP_F_B pairs, which DeepSpeed cannot run"),
    ("w_moved", r"0W0 \(rank 0, position 8\) runs apart from its input-gradient"),
    ("gpipe", r"rank 1 runs 1F3 at step 3 where DeepSpeed's 1F1B TrainSchedule runs 1B0"),
])
def test_deepspeed_refuses(name, match):
    with pytest.raises(ExportError, match=match):
        deepspeed_parts(case_plan(name))


@pytest.mark.parametrize("name", CASES)
def test_trace_matches_the_simulated_timeline(name):
    plan = case_plan(name)
    doc = json.loads(json.dumps(chrome_trace(plan)))
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == sum(len(plan.actions(r)) for r in range(plan.pp))
    for r in range(plan.pp):
        mine = sorted((e for e in spans if e["tid"] == r), key=lambda e: e["ts"])
        assert [e["name"] for e in mine] == [str(a) for a in plan.actions(r)]
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-6 for a, b in zip(mine, mine[1:]))
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(plan.predicted.step_time_s * 1e6, rel=1e-9)
    counters = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
    assert counters == {f"memory rank {r}" for r in range(plan.pp)}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {f"rank {r}" for r in range(plan.pp)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_on_several_plans(fmt, tmp_path):
    """Each format either renders or refuses with its own one-line message, never anything else."""
    rendered = 0
    for name in CASES:
        try:
            out = export_plan(case_plan(name), fmt, out=tmp_path / DEFAULT_OUT[fmt])
        except ExportError as exc:
            assert str(exc).startswith(f"export --format {fmt}: ") and "\n" not in str(exc)
            continue
        assert all(text for text in out.files.values())
        rendered += 1
    assert rendered >= 3


def _cli(argv, capsys):
    code = run_guarded(cli, argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_export_writes_files(tmp_path, capsys):
    plan_path = tmp_path / "plan.json"
    case_plan("vpp2").save(plan_path)
    for fmt in FORMATS:
        out = tmp_path / f"out-{fmt}"
        code, stdout, err = _cli(["export", str(plan_path), "--format", fmt, "--out", str(out)], capsys)
        if fmt == "deepspeed":
            assert code == 2 and err.startswith("error: export --format deepspeed: the plan uses 2 stages")
            assert not out.exists()
            continue
        assert code == 0, err
        assert out.exists() and f"wrote {out}" in stdout


def test_cli_export_stdout_and_json(tmp_path, capsys):
    plan_path = tmp_path / "plan.json"
    case_plan("uniform").save(plan_path)
    code, stdout, _ = _cli(["export", str(plan_path), "--format", "torch-csv", "--out", "-"], capsys)
    assert code == 0 and stdout == case_plan("uniform").torch_csv()
    code, stdout, _ = _cli(["export", str(plan_path), "--format", "megatron", "--out",
                            str(tmp_path / "m.txt"), "--json"], capsys)
    summary = json.loads(stdout)
    assert code == 0 and summary["format"] == "megatron" and summary["layout"] == "Et*8|t*8|t*8|t*8L"
    code, _, err = _cli(["export", str(plan_path), "--format", "torchtitan", "--out", "-"], capsys)
    assert code == 2 and "torchtitan needs its schedule CSV in a file" in err


def test_cli_refusal_is_one_line_exit_2_and_no_file(tmp_path):
    plan_path = tmp_path / "plan.json"
    case_plan("v").save(plan_path)
    out = tmp_path / "args.txt"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "export", str(plan_path), "--format",
                          "megatron", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.startswith("error: export --format megatron: the plan places stages on ranks [0, 1, 1, 0]")
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert not out.exists()


def test_cli_export_bad_inputs(tmp_path, capsys):
    code, _, err = _cli(["export", str(tmp_path / "missing.json"), "--format", "trace"], capsys)
    assert code == 2 and err.startswith("error: plan: cannot read")
    code, _, err = _cli(["export", str(tmp_path / "missing.json"), "--format", "onnx"], capsys)
    assert code == 2 and "Invalid value for '--format'" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1}')
    code, _, err = _cli(["export", str(bad), "--format", "torch-csv"], capsys)
    assert code == 2 and err.startswith("error: plan")
