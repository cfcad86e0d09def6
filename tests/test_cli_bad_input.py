"""Bad input end to end through ``ppplan``: one ``error: ...`` line naming the field,
exit code 2, no traceback, no output file."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.core.paths import CLUSTERS_DIR, MODELS_DIR

LLAMA_CLUSTER = yaml.safe_load((CLUSTERS_DIR / "llama3-8b.yaml").read_text())


def _assert_one_line_error(result, pattern: str) -> None:
    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.err
    import re

    assert re.search(pattern, lines[0]), lines[0]


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _cluster(tmp_path: Path, **changes) -> str:
    data = copy.deepcopy(LLAMA_CLUSTER)
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    return _write(tmp_path, "cluster.yaml", yaml.safe_dump(data))


def _model(tmp_path: Path, base: str, **changes) -> str:
    cfg = json.loads((MODELS_DIR / f"{base}.json").read_text())
    cfg.update(changes)
    folder = tmp_path / "mymodel"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def _profile(tmp_path: Path, recompute: str) -> str:
    """An analytical llama3-8b cost table computed with ``recompute``."""
    from planner.core.cluster import load_cluster
    from planner.core.costs_io import save_costs
    from planner.core.hf_config import load_model
    from profiler.analytical import analytical_costs

    cl = load_cluster(CLUSTERS_DIR / "llama3-8b.yaml").with_recompute(recompute)
    path = tmp_path / "profile.json"
    save_costs(analytical_costs(load_model("llama3-8b"), cl), path)
    return str(path)


# (id, extra argv builder(tmp_path) -> list[str], pattern naming the field)
PLAN_CASES = [
    ("unknown-model", lambda t: ["llama-9000"], r"model: unknown model id or missing file 'llama-9000'"),
    ("model-not-json", lambda t: [_write(t, "config.json", "{oops")], r"model config: .* is not valid JSON"),
    ("model-type", lambda t: [_model(t, "llama3-8b", model_type="bert")], r"config\.model_type: unsupported 'bert'"),
    ("model-field", lambda t: [_model(t, "qwen3-30b-a3b", num_experts_per_tok=0)],
     r"config\.num_experts_per_tok"),
    ("cluster-missing", lambda t: ["llama3-8b", "--cluster", str(t / "none.yaml")], r"cluster file: cannot read"),
    ("cluster-yaml", lambda t: ["llama3-8b", "--cluster", _write(t, "c.yaml", "gpu: [h100\n")],
     r"cluster file: .* is not valid YAML"),
    ("cluster-field", lambda t: ["llama3-8b", "--cluster", _cluster(t, parallel__zp=2)],
     r"cluster\.parallel\.zp: unknown field"),
    ("cluster-dispatcher", lambda t: ["llama3-8b", "--cluster", _cluster(t, network__dispatcher="mpi")],
     r"cluster\.network\.dispatcher: unknown 'mpi' \(use one of alltoall, deepep, hybridep\)"),
    ("cluster-cp", lambda t: ["llama3-8b", "--cluster", _cluster(t, parallel__cp=3)],
     r"parallel: pp x tp x cp x dp = 4x1x3x4 = 48 but num_gpus = 16"),
    ("cluster-gpu", lambda t: ["llama3-8b", "--cluster", _cluster(t, gpu="tpu-v5")], r"cluster\.gpu: unknown GPU"),
    ("cluster-type", lambda t: ["llama3-8b", "--cluster", _cluster(t, training__seq_len="8k")],
     r"cluster\.training\.seq_len: expected int"),
    ("degrees-product", lambda t: ["llama3-8b", "--cluster", _cluster(t, num_gpus=12)],
     r"parallel: pp x tp x dp = 4x1x4 = 16 but num_gpus = 12"),
    ("degrees-dp", lambda t: ["llama3-8b", "--dp", "3"], r"parallel: pp x tp x dp = 4x1x3 = 12 but num_gpus = 16"),
    ("degrees-pp", lambda t: ["llama3-8b", "--pp", "3"], r"--pp: pp x tp = 3x1 does not divide 16 GPUs"),
    ("layers-lt-stages", lambda t: ["llama3-8b", "--pp", "16", "--vpp", "4"],
     r"(--vpp|parallel\.pp).*64 stages.*34 layers|34 layers.*64 stages"),
    ("layers-lt-stages-pp", lambda t: [_model(t, "llama3-8b", num_hidden_layers=1), "--cluster",
                                       str(CLUSTERS_DIR / "llama3-8b.yaml")],
     r"parallel\.pp: 3 layers .* cannot fill pp x vpp = 4 stages"),
    ("no-default-cluster", lambda t: [_model(t, "llama3-8b")], r"--cluster: model 'mymodel' has no default cluster"),
    ("batch", lambda t: ["llama3-8b", "--global-batch", "130"],
     r"training\.global_batch: 130 is not divisible by dp x micro_batch_size = 4"),
    ("ep-experts", lambda t: ["qwen3-30b-a3b", "--cluster", _cluster(
        t, num_gpus=48, parallel={"pp": 4, "vpp": 1, "tp": 1, "ep": 12, "dp": 12},
        training={"global_batch": 96, "seq_len": 4096})], r"parallel\.ep: ep 12 does not divide 128 experts"),
    ("ep-dp", lambda t: ["qwen3-30b-a3b", "--ep", "3"], r"parallel\.ep: ep 3 must divide dp x tp = 8"),
    ("memory", lambda t: ["llama3-8b", "--memory-gib", "1"], r"fits? the memory limit.*stage \d+.*GiB"),
    ("schedule", lambda t: ["llama3-8b", "--schedule", "zigzag"],
     r"'--schedule': 'zigzag' is not one of 'auto', .*'1f1b', .*'cpsat'"),
    ("ep_overlap_v_placement", lambda t: ["qwen3-30b-a3b", "--pp", "2", "--vpp", "2", "--placement", "v",
                                          "--schedule", "interleaved-overlap"],
     r"--schedule: interleaved-overlap needs --placement loop, got v \(pass --placement loop\)"),
    ("ep_overlap_microbatches", lambda t: ["qwen3-30b-a3b", "--pp", "4", "--vpp", "2", "--schedule",
                                           "interleaved-overlap", "--microbatches", "2"],
     r"interleaved 1F1B needs microbatches divisible by pp=4; got 2 \(give --microbatches a multiple of 4"),
    # round-trip grid journey: DeepSeek-V3's 120 sequences per replica hold no multiple of pp 16;
    # the line suggested 16, 32, 48, which --microbatches then refused as not dividing 120
    ("interleaved_batch", lambda t: ["deepseek-v3", "--target", "megatron", "--vpp", "2", "--microbatches", "auto"],
     r"divisible by pp=16; got \d+ \(give --microbatches a multiple of 16 that divides the per-replica batch"),
    ("option-range", lambda t: ["llama3-8b", "--pp", "0"], r"'--pp': 0 is not in the range"),
    ("option-choice", lambda t: ["llama3-8b", "--partition", "magic"], r"'--partition'"),
    ("recompute-choice", lambda t: ["llama3-8b", "--recompute", "partial"],
     r"'--recompute': 'partial' is not one of 'auto', 'none', 'selective', 'full'"),
    ("cluster-recompute", lambda t: ["llama3-8b", "--cluster", _cluster(t, training__recompute="some")],
     r"training\.recompute: unknown 'some'.*use one of auto, none, selective, full"),
    ("profile-recompute", lambda t: ["llama3-8b", "--profile", _profile(t, "selective"), "--recompute", "full"],
     r"--recompute: full given but the profile was measured with selective.*--recompute selective"),
    # a round-trip journey: --recompute-modules over a profile was named --recompute, as 'modules:mlp'
    ("profile-recompute-modules", lambda t: ["llama3-8b", "--profile", _profile(t, "none"), "--target", "megatron",
                                             "--recompute-modules", "mlp"],
     r"^error: --recompute-modules: mlp given but the profile was measured with recompute none \(drop "
     r"--recompute-modules"),
    ("profile-missing", lambda t: ["llama3-8b", "--profile", str(t / "none.json")], r"profile: cannot read"),
    ("profile-json", lambda t: ["llama3-8b", "--profile", _write(t, "p.json", "[1,")], r"profile: .* is not valid JSON"),
    ("profile-schema", lambda t: ["llama3-8b", "--profile", _write(t, "p.json", json.dumps(
        {"schema_version": 1, "kind": "ppplan.costs", "layers": [{"type": "x", "f": -1, "i": 0, "w": 0}]}))],
     r"profile\.layers\[0\]\.f"),
    ("profile-layers", lambda t: ["llama3-8b", "--profile", _write(t, "p.json", json.dumps(
        {"schema_version": 1, "kind": "ppplan.costs", "layers": [{"type": "x", "f": 1, "i": 1, "w": 1}]}))],
     r"--profile: has 1 layers, model llama3-8b has 34"),
]


@pytest.mark.parametrize("case, argv, pattern", PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_plan_bad_input(ppplan, tmp_path, case, argv, pattern):
    out = tmp_path / "out" / "plan.json"
    result = ppplan("plan", *argv(tmp_path), "--out", str(out))
    _assert_one_line_error(result, pattern)
    assert not out.exists()
    assert not (tmp_path / "plan.json").exists()
    assert not out.parent.exists() or not any(out.parent.iterdir())


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    from planner.api import plan

    return plan("llama3-8b").to_dict()


PLAN_FILE_CASES = [
    ("missing", None, r"plan: cannot read"),
    ("not-json", "{", r"plan: .* is not valid JSON"),
    ("schema", lambda d: d.pop("stages"), r"plan: 'stages' is a required property"),
    ("action", lambda d: d["schedule"]["0"].__setitem__(0, "0Z0"), r"plan\.schedule\[0\]\[0\]: bad action '0Z0'"),
    ("stage-rank", lambda d: d["stages"][0].update(rank=9), r"plan\.stages\[0\]\.rank: 9 is not in 0\.\.3"),
    ("costs-length", lambda d: d["stage_costs"]["f"].pop(), r"plan\.stage_costs\.f: has 3 entries for 4 stages"),
    ("work-length", lambda d: d["stage_costs"]["work_bytes"].pop(),
     r"plan\.stage_costs\.work_bytes: has 3 entries for 4 stages"),
    ("work-negative", lambda d: d["stage_costs"]["work_bytes"].__setitem__(0, -1), r"plan\.stage_costs\.work_bytes"),
]


@pytest.mark.parametrize("command", ["validate", "simulate"])
@pytest.mark.parametrize("case, edit, pattern", PLAN_FILE_CASES, ids=[c[0] for c in PLAN_FILE_CASES])
def test_bad_plan_files(ppplan, tmp_path, good_plan, command, case, edit, pattern):
    path = tmp_path / "plan.json"
    if isinstance(edit, str):
        path.write_text(edit)
    elif edit is not None:
        data = copy.deepcopy(good_plan)
        edit(data)
        path.write_text(json.dumps(data))
    _assert_one_line_error(ppplan(command, str(path)), pattern)


def test_profile_bad_model_and_cluster(ppplan, tmp_path):
    out = tmp_path / "profile.json"
    _assert_one_line_error(ppplan("profile", "gpt-5", "--analytical", "--out", str(out)), r"model: unknown model id")
    _assert_one_line_error(ppplan("profile", "llama3-8b", "--analytical", "--cluster",
                                  _cluster(tmp_path, training__precision="fp3"), "--out", str(out)),
                           r"training\.precision: unknown 'fp3'")
    for field in ("attention_kernel", "cross_entropy", "fp8_recipe", "cp_comm_type"):
        _assert_one_line_error(ppplan("profile", "llama3-8b", "--analytical", "--cluster",
                                      _cluster(tmp_path, **{f"training__{field}": "magic"}), "--out", str(out)),
                               rf"training\.{field}: unknown 'magic' \(use one of ")
    assert not out.exists()


def test_unknown_command(ppplan):
    _assert_one_line_error(ppplan("plann"), r"No such command 'plann'")


def test_real_process_bad_input_has_no_traceback(tmp_path):
    """The console entry point itself (a fresh interpreter): exit 2, one line, nothing written."""
    out = tmp_path / "plan.json"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "plan", "llama3-8b", "--memory-gib", "1",
                          "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: ") and "Traceback" not in run.stderr
    assert run.stdout == "" and not out.exists()
