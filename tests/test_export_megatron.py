"""Megatron export: the layout string parses back, by Megatron-Core's own
``PipelineParallelLayerLayout`` (``tests/megatron_oracle.py``), to the plan's stages."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from megatron_oracle import megatron_stages
from planner.export import ExportError, export_plan
from planner.export.megatron import compress_stage, megatron_args, megatron_layout
from solvers.schedule.families.generators import interleaved_1f1b
from test_export_plans import SHIPPED, build_plan, case_plan, default_plan


def assert_layout_matches(plan, layout: str) -> None:
    stages = megatron_stages(layout, plan.pp, plan.model["layout"])
    assert len(stages) == plan.num_stages
    start = 0
    for i, (text, (a, b)) in enumerate(zip(stages, plan.bounds())):
        assert (start, start + len(text)) == (a, b)
        assert text == plan.model["layout"][a:b]
        assert i % plan.pp == plan.ranks()[i]
        start += len(text)


def _arg(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("model", SHIPPED)
def test_default_plan_layout_parses_back(model):
    plan = default_plan(model)
    assert_layout_matches(plan, megatron_layout(plan))


@pytest.mark.parametrize("name", ["uniform", "uneven", "vpp2", "w_adjacent", "mtp"])
def test_case_args_parse_back(name):
    plan = case_plan(name)
    m = megatron_args(plan)
    assert_layout_matches(plan, _arg(m.args, "--pipeline-model-parallel-layout"))
    assert _arg(m.args, "--pipeline-model-parallel-size") == str(plan.pp)
    assert int(_arg(m.args, "--num-layers")) == plan.model["layout"].count("t")
    dp = plan.parallel["dp"]
    assert int(_arg(m.args, "--global-batch-size")) == plan.num_microbatches * dp
    assert m.flags == []


def test_reference_example_layout():
    # Megatron's documented example: 61 decoder layers + MTP on pp 16, vpp 2.
    bounds = [(0, 4)] + [(4 + 2 * k, 6 + 2 * k) for k in range(29)] + [(62, 63), (63, 64)]
    plan = build_plan("deepseek-v3", pp=16, vpp=2, bounds=bounds, microbatches=16,
                      schedule=interleaved_1f1b(16, 2, 16), name="interleaved")
    assert megatron_layout(plan) == "Et*3|(tt|)*29,m|L"
    m = megatron_args(plan)
    assert _arg(m.args, "--mtp-num-layers") == "1"
    assert _arg(m.args, "--microbatch-group-size-per-virtual-pipeline-stage") == "16"
    assert m.alternative is None  # the MTP stage is not the loss stage


def test_compress_stage():
    assert compress_stage("Ettt") == "Et*3"
    assert compress_stage("tt") == "tt"
    assert compress_stage("ttmL") == "ttmL"
    assert compress_stage("t" * 12 + "L") == "t*12L"


def _megatron_builds(args: list[str], pp: int) -> list[int]:
    """Decoder layers per stage Megatron builds from first/last counts (transformer_block rules)."""
    n = int(_arg(args, "--num-layers"))
    vpp = int(_arg(args, "--num-virtual-stages-per-pipeline-rank")) if \
        "--num-virtual-stages-per-pipeline-rank" in args else 1
    first = int(_arg(args, "--decoder-first-pipeline-num-layers")) if \
        "--decoder-first-pipeline-num-layers" in args else None
    last = int(_arg(args, "--decoder-last-pipeline-num-layers")) if \
        "--decoder-last-pipeline-num-layers" in args else None
    middle = pp - (first is not None) - (last is not None)
    rest = n - (first or 0) - (last or 0)
    assert middle == 0 or rest % middle == 0
    per_rank = [rest // middle if middle else 0] * pp
    per_rank[0] = first if first is not None else per_rank[0]
    per_rank[-1] = last if last is not None else per_rank[-1]
    assert all(c % vpp == 0 for c in per_rank)
    return [per_rank[s % pp] // vpp for s in range(pp * vpp)]


@pytest.mark.parametrize("name", ["uniform", "vpp2"])
def test_alternative_first_last_gives_the_same_partition(name):
    plan = case_plan(name)
    alt = megatron_args(plan).alternative
    assert alt is not None and "--pipeline-model-parallel-layout" not in alt
    want = [plan.model["layout"][a:b].count("t") for a, b in plan.bounds()]
    assert _megatron_builds(alt, plan.pp) == want
    assert plan.megatron_args(layout=False) == alt


def test_no_alternative_for_an_uneven_middle():
    plan = case_plan("uneven")
    assert megatron_args(plan).alternative is None
    with pytest.raises(ExportError, match="decoder-first/last counts cannot express it"):
        plan.megatron_args(layout=False)


def test_fused_pp1_needs_overlap_and_delay_wgrad():
    m = megatron_args(case_plan("fused_pp1_split"))
    assert m.flags == ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    assert m.flags[0] in m.args and m.flags[1] in m.args


def test_fused_interleaved_is_megatrons_ep_overlap():
    m = megatron_args(case_plan("fused_vpp2"))
    assert m.flags == ["--overlap-moe-expert-parallel-comm"]
    assert "--num-virtual-stages-per-pipeline-rank" in m.args or "--pipeline-model-parallel-layout" in m.args


@pytest.mark.parametrize("name, match", [
    ("v", r"places stages on ranks \[0, 1, 1, 0\] \(v placement\) but Megatron runs stage i on pipeline rank i % pp"),
    ("custom", r"\(custom placement\)"),
    ("w_moved", r"0W0 \(rank 0, position 8\) runs apart from its input-gradient"),
    ("gpipe", r"rank 1 runs 1F3 at step 3 where Megatron's 1F1B runs 1B0"),
    ("fused", r"Megatron runs only with virtual stages when pp > 1"),
])
def test_megatron_refuses(name, match):
    with pytest.raises(ExportError, match=match):
        megatron_args(case_plan(name))


def test_megatron_refuses_overlap_without_ep_or_with_full_recompute():
    plan = copy.deepcopy(case_plan("fused_pp1_split"))
    plan.parallel = dataclasses.replace(plan.parallel, ep=1)  # the typed part is frozen
    with pytest.raises(ExportError, match=r"needs expert parallelism \(ep > 1\)"):
        megatron_args(plan)
    plan = copy.deepcopy(case_plan("fused_pp1_split"))
    plan.cluster = dataclasses.replace(plan.cluster, training=dataclasses.replace(plan.cluster.settings, recompute="full"))
    with pytest.raises(ExportError, match="does not run with full recomputation"):
        megatron_args(plan)


def test_megatron_refuses_mtp_outside_the_last_chunk():
    plan = build_plan("qwen3-next-80b-a3b", pp=1, vpp=2, bounds=[(0, 50), (50, 51)], microbatches=4,
                      schedule=interleaved_1f1b(1, 2, 4), name="interleaved")
    with pytest.raises(ExportError, match=r"the MTP layer is in stage 0, virtual chunk 0 of rank 0; "
                                          r"Megatron needs it in the rank's last chunk \(1\)"):
        megatron_layout(plan)


def test_export_file_is_the_argument_line(tmp_path):
    out = export_plan(case_plan("vpp2"), "megatron", out=tmp_path / "args.txt")
    import shlex

    assert shlex.split(out.files[str(tmp_path / "args.txt")]) == out.summary["args"]


@pytest.mark.parametrize("mode, expected", [
    ("none", []),
    ("selective", ["--recompute-granularity", "selective", "--recompute-modules", "core_attn",
                   "layernorm"]),  # the case plan is dense: no moe_act (Megatron refuses it without MoE)
    ("full", ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]),
])
def test_megatron_args_carry_the_plans_recompute_mode(mode, expected):
    plan = copy.deepcopy(case_plan("vpp2"))
    plan.cluster = dataclasses.replace(plan.cluster, training=dataclasses.replace(plan.cluster.settings, recompute=mode))
    args = megatron_args(plan).args
    flags = [a for a in args if a.startswith("--recompute")]
    assert flags == [a for a in expected if a.startswith("--")]
    if expected:
        k = args.index(expected[0])
        assert args[k:k + len(expected)] == expected


def test_planned_ep_overlap_with_virtual_stages_exports_its_flag(ppplan, tmp_path):
    """``--schedule interleaved-overlap`` end to end: the plan runs Megatron's combined 1F1B
    with virtual stages, and the export turns it into ``--overlap-moe-expert-parallel-comm``."""
    made = ppplan("plan", "qwen3-30b-a3b", "--pp", "2", "--vpp", "2", "--schedule", "interleaved-overlap",
                  "--recompute", "selective", "--out", "p.json", "--quiet")
    assert made.code == 0, made.err
    out = ppplan("export", "p.json", "--format", "megatron", "--out", "args.txt")
    assert out.code == 0, out.err
    args = (tmp_path / "args.txt").read_text()
    assert "--overlap-moe-expert-parallel-comm" in args and "--recompute-granularity selective" in args
