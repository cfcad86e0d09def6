"""Issue 15 rows: each hostile input gives one ``error:`` line on stderr, exit 2, no
traceback, no output written, and the input file unchanged."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.core.paths import MODELS_DIR

ROUTING = Path(__file__).resolve().parent.parent / "examples" / "routing"


def _contract(result, pattern: str, *, outputs=(), inputs: dict[Path, bytes] | None = None) -> None:
    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert "Traceback" not in result.err
    assert re.search(pattern, lines[0]), lines[0]
    for out in outputs:
        assert not Path(out).exists(), out
    for path, data in (inputs or {}).items():
        assert path.read_bytes() == data, f"{path} changed"


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict:
    """A valid llama3-8b plan (short search) and its analytical profile, as dicts."""
    from planner.api import plan, resolve_cluster
    from planner.core.costs_io import costs_to_dict
    from planner.core.hf_config import load_model
    from profiler.analytical import analytical_costs

    spec = load_model("llama3-8b")
    return {"plan": plan("llama3-8b", work=1.0).to_dict(),
            "profile": costs_to_dict(analytical_costs(spec, resolve_cluster(spec, None).with_recompute("none")))}


def _dump(tmp_path: Path, name: str, data) -> tuple[str, dict[Path, bytes]]:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path), {path: path.read_bytes()}


def _config(tmp_path: Path, **changes) -> str:
    cfg = json.loads((MODELS_DIR / "llama3-8b.json").read_text()) | changes
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path / "m")


CLUSTER = ["--cluster", str(Path(MODELS_DIR).parent / "clusters" / "llama3-8b.yaml")]

OPTION_ROWS = [
    (["--memory-gib", "inf"], r"'--memory-gib': inf is not in the range"),
    (["--memory-gib", "nan"], r"'--memory-gib': 'nan' is not a finite number"),
    (["--memory-limit", "1e400"], r"--memory-limit: '1e400' is too large"),
    (["--microbatches", "32", "--deadline", "0W3=nan"], r"--deadline: '0W3=nan': deadline must be a finite"),
    (["--time-limit", "inf"], r"'--time-limit': inf is not in the range"),
    (["--microbatches", "7"], r"--microbatches: 7 does not divide the per-replica batch 32 .*use one of"),
    (["--out", ""], r"--out: is an empty path"),
]


@pytest.mark.parametrize("argv, pattern", OPTION_ROWS, ids=[" ".join(r[0]) for r in OPTION_ROWS])
def test_plan_options(ppplan, tmp_path, argv, pattern):
    _contract(ppplan("plan", "llama3-8b", *(["--out", "plan.json"] if "--out" not in argv else []), *argv),
              pattern, outputs=[tmp_path / "plan.json"])


@pytest.mark.parametrize("changes, pattern", [
    ({"num_hidden_layers": 10**9}, r"config\.num_hidden_layers: 1000000000 is above the planner's limit of 512"),
    ({"vocab_size": 0}, r"config\.vocab_size: must be positive"),
    ({"hidden_size": 10**7}, r"config\.hidden_size: .* above the planner's limit"),
])
def test_config_size_guard(ppplan, tmp_path, changes, pattern):
    model = _config(tmp_path, **changes)
    before = {Path(model) / "config.json": (Path(model) / "config.json").read_bytes()}
    t0 = time.monotonic()
    _contract(ppplan("plan", model, *CLUSTER, "--out", "plan.json"), pattern,
              outputs=[tmp_path / "plan.json"], inputs=before)
    assert time.monotonic() - t0 < 10  # refused before building a billion layers


def test_stage_microbatch_guard():
    from planner.core.errors import InputError
    from planner.core.limits import MAX_STAGE_MICROBATCHES, check_stage_microbatches

    check_stage_microbatches(MAX_STAGE_MICROBATCHES // 8, 8)
    with pytest.raises(InputError, match=r"--microbatches: .* above the planner's limit"):
        check_stage_microbatches(MAX_STAGE_MICROBATCHES, 2)


def test_microbatches_make_the_batch_consistent(ppplan, tmp_path):
    assert ppplan("plan", "llama3-8b", "--microbatches", "8", "--work", "1", "--quiet").code == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert (plan["microbatches"]["count"], plan["microbatches"]["size"]) == (8, 4)  # 8 x 4 x dp 4 = 128


def test_out_over_inputs_refused(ppplan, tmp_path, good):
    plan_path, plan_bytes = _dump(tmp_path, "in.json", good["plan"])
    prof_path, prof_bytes = _dump(tmp_path, "c.json", good["profile"])
    _contract(ppplan("export", plan_path, "--format", "trace", "--out", plan_path),
              r"--out: .*in\.json is also an input", inputs=plan_bytes)
    _contract(ppplan("plan", "llama3-8b", "--profile", prof_path, "--out", prof_path),
              r"--out: .*c\.json is also an input", inputs=prof_bytes)
    link = tmp_path / "link.json"
    link.symlink_to(plan_path)
    _contract(ppplan("export", plan_path, "--format", "trace", "--out", str(link)),
              r"--out: .*link\.json is also an input", inputs=plan_bytes)
    _contract(ppplan("simulate", plan_path, "--png", plan_path), r"--png: .* is also an input", inputs=plan_bytes)
    _contract(ppplan("plan", "llama3-8b", "--out", "x.png", "--png", "x.png"), r"--png: x\.png is also given to --out")


@pytest.mark.parametrize("verb", ["plan", "export", "profile", "simulate", "replan"])
def test_unwritable_folder(ppplan, tmp_path, good, verb):
    """A folder that is a file (works as root too) and a read-only folder (skipped as root)."""
    plan_path, plan_bytes = _dump(tmp_path, "in.json", good["plan"])
    (tmp_path / "afile").write_text("x")
    trace, _ = _dump(tmp_path, "t.json", {"layers": {}})
    for target in [tmp_path / "afile" / "o.json"] + ([tmp_path / "ro" / "o.json"] if os.geteuid() else []):
        (tmp_path / "ro").mkdir(mode=0o555, exist_ok=True)
        argv = {"plan": ["plan", "llama3-8b", "--out", str(target)],
                "export": ["export", plan_path, "--format", "trace", "--out", str(target)],
                "profile": ["profile", "llama3-8b", "--analytical", "--out", str(target)],
                "simulate": ["simulate", plan_path, "--png", str(target)],
                "replan": ["replan", plan_path, "--routing", trace, "--out", str(target)]}[verb]
        _contract(ppplan(*argv), r"--(out|png): cannot write .*(not a folder|not writable)",
                  outputs=[target], inputs=plan_bytes)


def test_png_and_plan_written_together_or_not_at_all(ppplan, tmp_path, monkeypatch):
    """A PNG that cannot be written (a read-only folder, as root can still write there: the
    temporary file is refused) leaves no plan.json and no temporary file: every output's
    temporary file is written before any rename."""
    pytest.importorskip("matplotlib")
    import planner.core.outputs as outputs

    real = outputs.tempfile.mkstemp

    def refuse_png(*args, prefix="", **kwargs):
        if prefix.endswith(".png."):
            raise PermissionError(13, "Permission denied")
        return real(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(outputs.tempfile, "mkstemp", refuse_png)
    result = ppplan("plan", "llama3-8b", "--work", "1", "--out", "p.json", "--png", "p.png")
    assert result.code == 2 and "cannot write" in result.err and "Traceback" not in result.err
    assert list(tmp_path.iterdir()) == []


def test_output_mode_is_the_usual_one(ppplan, tmp_path):
    pytest.importorskip("matplotlib")
    assert ppplan("plan", "llama3-8b", "--work", "1", "--quiet", "--png", "p.png").code == 0
    mask = os.umask(0)
    os.umask(mask)
    for name in ("plan.json", "p.png"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


def _edited_plan(good, edit):
    data = copy.deepcopy(good["plan"])
    edit(data)
    return data


FILE_ROWS = [
    ("validate", lambda t, g: [str(_binary(t))], r"plan: .*bin\.json is not UTF-8 text"),
    ("validate", lambda t, g: [_dump(t, "p.json", _edited_plan(g, lambda d: d["stage_costs"]["f"].__setitem__(
        1, float("nan"))))[0]], r"plan\.stage_costs\.f\[1\]: is nan"),
    ("simulate", lambda t, g: [_dump(t, "p.json", _edited_plan(g, lambda d: d["stage_costs"]["f"].__setitem__(
        1, float("nan"))))[0]], r"plan\.stage_costs\.f\[1\]: is nan"),
    ("simulate", lambda t, g: [_dump(t, "p.json", _edited_plan(g, lambda d: [d["stage_costs"].__setitem__(
        k, [0] * len(d["stage_costs"][k])) for k in "fiw"]))[0]], r"plan\.stage_costs: every F time"),
    ("simulate", lambda t, g: [_dump(t, "p.json", _edited_plan(g, lambda d: d["microbatches"].__setitem__(
        "count", d["microbatches"]["count"] - 1)))[0]], r"plan\.schedule: invalid, so not simulated: .*out of range"),
    ("replan", lambda t, g: [_dump(t, "p.json", _edited_plan(g, lambda d: d["schedule"].pop("0")))[0],
                             "--routing", str(ROUTING / "hot_late.jsonl"), "--out", "o.json"],
     r"plan\.schedule: invalid, so not re-planned: "),
    ("plan", lambda t, g: ["llama3-8b", "--profile", _dump(t, "c.json", _edited_profile(g, "f", float("nan")))[0]],
     r"profile\.layers\[1\]\.f: is nan"),
    ("plan", lambda t, g: ["llama3-8b", "--profile", _dump(t, "c.json", _edited_profile(g, "f", float("inf")))[0]],
     r"profile\.layers\[1\]\.f: is inf"),
    ("plan", lambda t, g: ["llama3-8b", "--profile", _dump(t, "c.json", _edited_profile(g, "*", 0))[0]],
     r"profile\.layers: every decoder layer's forward .* is 0"),
    ("profile", lambda t, g: ["--compare", _dump(t, "a.json", g["profile"])[0],
                              _dump(t, "b.json", _edited_profile(g, "f", float("nan")))[0]], r"profile\.layers\[1\]\.f"),
    ("profile", lambda t, g: ["llama3-8b", "--warmup", "-1"], r"'--warmup'"),
    ("profile", lambda t, g: ["llama3-8b", "--threads", "-1"], r"'--threads'"),
    ("replan", lambda t, g: [_dump(t, "p.json", g["plan"])[0], "--routing", "x.json", "--min-gain", "nan",
                             "--out", "o.json"], r"'--min-gain': 'nan' is not a finite number"),
]


def _binary(tmp_path: Path) -> Path:
    path = tmp_path / "bin.json"
    path.write_bytes(b"\x80\x81\x00\xff" * 8)
    return path


def _edited_profile(good, key: str, value) -> dict:
    data = copy.deepcopy(good["profile"])
    for k, layer in enumerate(data["layers"]):
        if key == "*":
            layer.update(f=value, i=value, w=value)
        elif k == 1:
            layer[key] = value
    return data


@pytest.mark.parametrize("verb, argv, pattern", FILE_ROWS, ids=[f"{r[0]}-{i}" for i, r in enumerate(FILE_ROWS)])
def test_bad_files(ppplan, tmp_path, good, verb, argv, pattern):
    args = argv(tmp_path, good)
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    _contract(ppplan(verb, *args), pattern, outputs=[tmp_path / "plan.json", tmp_path / "profile.json"],
              inputs=before)


def test_bug_is_not_bad_input(ppplan, monkeypatch):
    """An unexpected exception is reported as a bug (exit 70, one line, tracker hint), not exit 2."""
    import planner.simulation as simulation

    def boom(path):
        raise KeyError("stage_costs")

    monkeypatch.setattr(simulation, "validate_plan", boom)
    monkeypatch.delenv("PPPLAN_DEBUG", raising=False)
    result = ppplan("validate", "whatever.json")
    assert result.code == 70
    assert result.err.count("\n") == 1 and "internal error: KeyError" in result.err
    assert "please report it" in result.err and "Traceback" not in result.err
    monkeypatch.setenv("PPPLAN_DEBUG", "1")
    with pytest.raises(KeyError):
        ppplan("validate", "whatever.json")


def test_help_texts(ppplan):
    out = ppplan("plan", "--help").out
    assert "--gpu GPU" in out
    for option in ("--partition", "--placement"):
        block = out.split(option, 1)[1].split("\n  --", 1)[0]
        assert len(block.split()) > 6, block


@pytest.mark.slow
def test_ctrl_c_stops_plan(tmp_path):
    """SIGINT 4 s into a long search (DeepSeek-V3 with --work 200): exit 130, one line, no plan
    file. How fast it stops is a benchmark (benchmarks/interrupt.py), not a test."""
    out = tmp_path / "plan.json"
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "plan", "deepseek-v3", "--schedule", "cpsat",
                             "--work", "200", "--quiet", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    time.sleep(4.0)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err == "interrupted; no output written\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_killed_replay_rank_is_one_line(tmp_path):
    """A replay rank that dies: the survivor's torch schedule grid is not dumped; one line, exit 3."""
    from test_replay_run import make_plan, one_f_one_b, tiny_config

    path = tmp_path / "plan.json"
    make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)]).save(path)
    for fault in ("die:0", "die:1"):
        run = subprocess.run([sys.executable, "-m", "planner.cli", "replay", str(path), "--fault", fault,
                              "--timeout", "5", "--out", str(tmp_path / "r.json")],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 3, run.stderr
        assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: replay failed: rank"), run.stderr
        assert not (tmp_path / "r.json").exists()


def test_summary_explains_notation_and_byo_costs(ppplan):
    """The README's bring-your-own-costs example: no 'None' baseline, MFU says why it is absent."""
    example = Path(__file__).resolve().parent.parent / "examples" / "costs" / "four_stages.json"
    result = ppplan("plan", "--profile", str(example), "--pp", "4", "--microbatches", "12", "--memory-limit",
                    "4mb", "--work", "1")
    assert result.code == 0, result.err
    assert "None" not in result.out and "MFU 0.0%" not in result.out
    assert "MFU n/a (the costs carry no FLOP counts)" in result.out
    assert "legend: microbatches M x S = M microbatches of S sequences" in result.out
    assert "E embedding, t decoder layer, m MTP module, L loss head" in result.out
