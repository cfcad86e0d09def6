"""``ppplan plan --layout``: the user's partition, read as Megatron-Core reads it, planned beside ppplan's.

The oracle for the grammar is Megatron-Core's own ``PipelineParallelLayerLayout`` (installed with
the ``frameworks`` extra): every layout accepted here parses there to the same stages, and the
layouts it refuses are refused here too.
"""

from __future__ import annotations

import json

import pytest

from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.layout_text import compress_stage, join_stages, layout_bounds, layout_stages
from planner.planning.user_layout import read_user_layout
from megatron_oracle import megatron_stages

LLAMA, DSV3 = load_model("llama3-8b"), load_model("deepseek-v3")


def ours(layout: str, pp: int, model) -> list[str]:
    """ppplan's reading: stage letters, checked, and the bounds cut the model's own letters alike."""
    stages = layout_stages(layout, model.layout)
    bounds = layout_bounds(stages, pp)
    assert [model.layout[a:b] for a, b in bounds] == stages
    return stages


ACCEPTED = [  # (layout, pp, model)
    ("Et*7|t*8|t*8|t*9L", 4, LLAMA),
    ("Et*7|t*8|t*8|t*9L", 2, LLAMA),
    ("E,t*4|t*4,|t*8|t*16,L", 4, LLAMA),
    ("E(t*4|)*7,t*4L", 4, LLAMA),
    ("E(t*4|)*7,t*4L", 8, LLAMA),
    ("Ettt|(tttt|)*6,tttttL", 2, LLAMA),
    ("Et*3|(tt|)*29,m|L", 16, DSV3),
    ("Et|(tt|)*30mL", 16, DSV3),  # Megatron-Bridge 25.09 DeepSeek-V3 recipe (benchmarks/data/published_runs.json)
    ("Et|(tt|)*30mL", 8, DSV3),
    ("Et*30|t*31mL", 2, DSV3),
]


@pytest.mark.parametrize("layout,pp,model", ACCEPTED, ids=[f"{a}-pp{b}" for a, b, _ in ACCEPTED])
def test_accepted_layouts_read_as_megatron_reads_them(layout, pp, model):
    assert ours(layout, pp, model) == megatron_stages(layout, pp, model.layout)


@pytest.mark.parametrize("counts,pp,model", [("4,8,8,12", 4, LLAMA), ("0,11,11,10", 4, LLAMA), ("32", 1, LLAMA),
                                             ("3,4,4,4,4,4,4,5", 4, LLAMA), ("4," + "4," * 14 + "1", 16, DSV3)])
def test_counts_are_the_layout_megatron_reads(counts, pp, model):
    """Decoder counts per stage: written back in Megatron's grammar (the exporter's writer), Megatron
    reads the same stages, with the embedding first and MTP and loss on the last stage."""
    stages = ours(counts, pp, model)
    assert [s.count("t") for s in stages] == [int(c) for c in counts.split(",")]
    text = join_stages([compress_stage(s) for s in stages])
    assert megatron_stages(text, pp, model.layout) == stages


REFUSED = [  # (layout, pp, model, what ppplan says)
    ("Et*7|t*8|t*8|t*8L", 4, LLAMA, r"31 decoder layers, the model has 32"),
    ("t*8|Et*7|t*8|t*9L", 4, LLAMA, r"embedding E must be the first"),
    ("Et*8|t*8|t*8L|t*8", 4, LLAMA, r"loss head L must be the last"),
    ("EEt*8|t*8|t*8|t*8L", 4, LLAMA, r"embedding \(E\) appears 2 times"),
    ("Et*8|t*8|t*8|t*8LL", 4, LLAMA, r"loss head \(L\) appears 2 times"),
    ("Et*8|t*8|t*8|t*8xL", 4, LLAMA, r"unknown symbol 'x'"),
    ("Et*8|t*8|t*8|t*-8L", 4, LLAMA, r"unknown symbol '\*'"),
    ("Et*8|t*8|t*8|t*8 L", 4, LLAMA, r"unknown symbol ' '"),
    ("E((t*4|)*2)*4,L", 4, LLAMA, r"unknown symbol '\('"),
    ("Et*8|t*8|t*8|t*8mL", 4, LLAMA, r"1 MTP layers \(m\), the model has 0"),
    ("Et*30|t*31|L", 1, DSV3, r"0 MTP layers \(m\), the model has 1"),
    ("Et*30|m|t*31L", 1, DSV3, r"decoder layer t follows an MTP layer"),
    ("Et*30|t*31m|L", 1, DSV3, r"Megatron needs it in the rank's last chunk \(2\)"),
]


@pytest.mark.parametrize("layout,pp,model,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_layouts_megatron_refuses_are_refused(layout, pp, model, message):
    with pytest.raises(Exception):  # Megatron's own verdict (AssertionError, IndexError, ...)
        megatron_stages(layout, pp, model.layout)
    with pytest.raises(InputError, match=message):
        ours(layout, pp, model)


def test_empty_stage_refused_though_megatron_builds_it():
    """ppplan plans stages of at least one layer; Megatron accepts an empty one."""
    assert megatron_stages("Et*8|t*8||t*16L", 4, LLAMA.layout)[2] == ""
    with pytest.raises(InputError, match="stage 2 holds no layer"):
        ours("Et*8|t*8||t*16L", 4, LLAMA)


@pytest.mark.parametrize("counts,message", [("-1,11,11,11", "count -1 is below 0"),
                                            ("8,8,8,7", "31 decoder layers, the model has 32"),
                                            ("8,0,16,8", "stage 1 holds no layer")])
def test_bad_counts(counts, message):
    with pytest.raises(InputError, match=message):
        layout_stages(counts, LLAMA.layout)


@pytest.mark.parametrize("pp,vpp,want", [(None, None, (4, 2)), (2, None, (2, 4)), (None, 4, (2, 4)),
                                         (8, 1, (8, 1))])
def test_pp_and_vpp_follow_from_the_layout(pp, vpp, want):
    """With neither option, pp is the cluster's (llama3-8b: 4) and vpp = stages / pp."""
    user = read_user_layout("E(t*4|)*7,t*4L", LLAMA, pp=pp, vpp=vpp, cluster=None, conflicts={})
    assert (user.pp, user.vpp) == want and len(user.stages) == 8


@pytest.mark.parametrize("pp,vpp,message", [(3, None, "8 stages is not a multiple of --pp 3"),
                                            (4, 4, r"8 stages, but --pp 4 x --vpp 4 = 16"),
                                            (None, 3, "not a multiple of --vpp 3")])
def test_pp_and_vpp_conflicts(pp, vpp, message):
    with pytest.raises(InputError, match=message):
        read_user_layout("E(t*4|)*7,t*4L", LLAMA, pp=pp, vpp=vpp, cluster=None, conflicts={})


def test_cluster_pp_must_divide_the_stages():
    with pytest.raises(InputError, match=r"3 stages, not a multiple of the cluster's pp 4 \(pass --pp"):
        read_user_layout("10,11,11", LLAMA, pp=None, vpp=None, cluster=None, conflicts={})


# --- end to end through the command line ---------------------------------------------------------

def _one_line(result, pattern: str) -> None:
    import re

    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(("error: --layout", "error: --keep-layout")), lines
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("argv,pattern", [
    (["--layout", "Et*7|t*8|t*8|t*8L"], r"31 decoder layers, the model has 32"),
    (["--layout", "4,8,8,12", "--first-stage-layers", "4"], r"given together with --first-stage-layers"),
    (["--layout", "4,8,8,12", "--pp", "3"], r"4 stages is not a multiple of --pp 3"),
    (["--layout", "4,8,8,12", "--pp", "2", "--vpp", "1"], r"4 stages, but --pp 2 x --vpp 1 = 2"),
    (["--layout", "4,8,8,12", "--gpus", "16"], r"given together with --gpus"),
    (["--layout", "Et*8|t*8|t*8|t*8mL"], r"MTP layers \(m\), the model has 0"),
    (["--keep-layout"], r"needs --layout"),
])
def test_cli_bad_layouts_exit_2_in_one_line(ppplan, tmp_path, argv, pattern):
    result = ppplan("plan", "llama3-8b", "--work", "0.1", *argv)
    _one_line(result, pattern)
    assert not (tmp_path / "plan.json").exists()


@pytest.fixture(scope="module")
def layout_plans(tmp_path_factory):
    """llama3-8b on its cluster (pp 4), planned without --layout, with it, and with --keep-layout."""
    from planner.cli import main

    folder = tmp_path_factory.mktemp("layout")
    common = ["plan", "llama3-8b", "--work", "0.3", "--target", "megatron", "--quiet"]
    for name, extra in (("free", []), ("with", ["--layout", "4,8,8,12"]),
                        ("keep", ["--layout", "Et*4|t*8|t*8|t*12L", "--keep-layout"])):
        with pytest.raises(SystemExit) as exc:
            main([*common, *extra, "--out", str(folder / f"{name}.json")])
        assert exc.value.code in (0, None)
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in ("free", "with", "keep")} | \
        {"folder": folder}


USER_STAGES = [[0, 5], [5, 13], [13, 21], [21, 34]]
"""4,8,8,12 on llama3-8b's E + 32 t + L."""


def test_layout_leaves_the_free_plan_as_it_was(layout_plans):
    free, with_layout = layout_plans["free"], layout_plans["with"]
    for key in ("stages", "schedule", "microbatches", "predicted"):
        assert with_layout[key] == free[key], key
    assert {k: v for k, v in with_layout["baselines"].items() if k != "user_layout"} == free["baselines"]


def test_user_layout_baseline_and_kept_plan_agree(layout_plans):
    mine = layout_plans["with"]["baselines"]["user_layout"]
    assert mine["stages"] == USER_STAGES and mine["layout"] == "4,8,8,12" and mine["fits_memory"] is True
    assert mine["plan_speedup"] == pytest.approx(mine["step_time_s"] / layout_plans["with"]["predicted"]["step_time_s"])
    assert len(mine["peak_memory_bytes"]) == 4 and 0 <= mine["bubble_fraction"] < 1
    keep = layout_plans["keep"]
    assert [s["layers"] for s in keep["stages"]] == USER_STAGES and keep["solver"]["pins"]["stages"] == USER_STAGES
    assert keep["predicted"]["step_time_s"] == pytest.approx(mine["step_time_s"])  # the same pinned plan
    assert keep["baselines"]["ppplan"]["step_time_s"] == pytest.approx(layout_plans["free"]["predicted"]["step_time_s"])
    assert set(keep["baselines"]) == {"user_layout", "ppplan", "plan"}


def test_layout_plans_validate_simulate_and_export(ppplan, layout_plans):
    folder = layout_plans["folder"]
    for name in ("with", "keep"):
        path = str(folder / f"{name}.json")
        assert ppplan("validate", path).code == 0
        sim = ppplan("simulate", path)
        assert sim.code == 0 and "your layout: " in sim.out, sim.out
        assert json.loads(ppplan("simulate", path, "--json").out)["user_layout"]["stages"] == USER_STAGES
        out = str(folder / f"{name}.sh")
        assert ppplan("export", path, "--format", "megatron", "--out", out).code == 0
        text = (folder / f"{name}.sh").read_text()
        layout = text.split("--pipeline-model-parallel-layout ")[1].split()[0].strip("'")
        plan = layout_plans[name]
        got = megatron_stages(layout, plan["parallel"]["pp"], LLAMA.layout)
        assert got == [LLAMA.layout[a:b] for a, b in (s["layers"] for s in plan["stages"])]
    assert layout_plans["keep"]["stages"][0]["layers"] == [0, 5]


def test_a_layout_over_memory_is_still_reported(ppplan, tmp_path):
    """29 decoder layers on the last of 4 Llama 3 8B stages without recomputation need more than the
    shipped limit: the baseline comes from the plan without the limit, marked as not fitting; with
    --keep-layout the command refuses in one line and writes nothing."""
    argv = ("plan", "llama3-8b", "--layout", "1,1,1,29", "--recompute", "none", "--work", "0.3")
    assert ppplan(*argv, "--quiet").code == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    mine = plan["baselines"]["user_layout"]
    assert mine["fits_memory"] is False and mine["step_time_s"] > plan["predicted"]["step_time_s"]
    assert max(mine["peak_memory_bytes"]) > plan["predicted"]["memory_limit_bytes"]
    (tmp_path / "plan.json").unlink()
    refused = ppplan(*argv, "--keep-layout")
    assert refused.code == 2 and refused.err.count("\n") == 1 and "on rank 3" in refused.err, refused.err
    assert not (tmp_path / "plan.json").exists()


def test_a_virtual_stage_layout_is_kept_and_exported(ppplan, tmp_path):
    """pp 4 from the cluster, vpp 2 from the layout's 8 stages; Megatron-Core reads the export back."""
    layout = "E(t*4|)*7,t*4L"
    assert ppplan("plan", "llama3-8b", "--layout", layout, "--keep-layout", "--target", "megatron",
                  "--work", "0.3", "--quiet").code == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert (plan["parallel"]["pp"], plan["parallel"]["vpp"]) == (4, 2)
    stages = [LLAMA.layout[a:b] for a, b in (s["layers"] for s in plan["stages"])]
    assert stages == megatron_stages(layout, 4, LLAMA.layout)
    assert ppplan("export", "plan.json", "--format", "megatron", "--out", "run.sh").code == 0
    written = (tmp_path / "run.sh").read_text().split("--pipeline-model-parallel-layout ")[1].split()[0].strip("'")
    assert megatron_stages(written, 4, LLAMA.layout) == stages


@pytest.mark.parametrize("text", ["Et*99999999L", "(t*999999|)*999999", "E" + "t*900000" * 3 + "L"])
def test_a_layout_that_unrolls_too_far_is_refused_before_it_fills_memory(text):
    with pytest.raises(InputError, match="unrolls to more than 1000000 layers"):
        layout_stages(text, LLAMA.layout)
