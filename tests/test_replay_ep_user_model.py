"""Expert-parallel replay of the shipped Qwen3-Next-80B-A3B at the width a user profiles it.

``ppplan profile qwen3-next-80b-a3b --device cpu --scale 0.03125 --seq-len 128`` then a
pp 2, 4-microbatch plan, replayed with ``--ep 2`` (4 gloo processes, real all-to-alls):
the gradient check must pass for a fused (1F1B with overlapped F&B pairs) and a plain
1F1B plan. At this width the model amplifies last-bit differences of its expert GEMMs
into gradient differences far past the check's tolerance, so the losses must be
bitwise those of the single process ([Note: one GEMM per source rank] in
``profiler.layers.moe``). Both plans share one launch (their steps alternate), and the
plans are written here as ``ppplan plan`` writes them from such a profile (same model,
stage bounds and schedule; a profile "measured on this device", so nothing is re-timed).
"""

from __future__ import annotations

import pytest

from planner.core.costs import CostTable, LayerCost
from planner.core.placement import stage_ranks
from planner.core.plan import Plan, stage_costs_to_dict
from planner.core.schedule import format_schedule
from planner.core.simulate import simulate
from planner.core.stage_costs import stage_costs
from solvers.schedule.families.generators import one_f_one_b

MODEL = "qwen3-next-80b-a3b"
LAYERS = 51
"""Embedding, 48 decoder layers, MTP, head."""
BOUNDS = [(0, 26), (26, 51)]
"""The stage bounds ``ppplan plan --schedule 1f1b-overlap`` chose from that profile."""
SCALE, SEQ, MICROBATCHES = 0.03125, 128, 4


def _plan(*, fuse: bool) -> Plan:
    table = CostTable(model=MODEL, source="user", layers=tuple(
        LayerCost(type=f"t{k}", f=1e-3, i=1e-3, w=1e-3, out_bytes=SEQ * 64 * 4) for k in range(LAYERS)))
    ranks = stage_ranks(len(BOUNDS), 2, "loop")
    schedule = one_f_one_b(2, MICROBATCHES, fuse=fuse)
    sc = stage_costs(table, BOUNDS, ranks)
    sim = simulate(schedule, sc)
    return Plan(
        model={"name": MODEL, "num_layers": LAYERS}, cluster={},
        parallel={"pp": 2, "vpp": 1, "tp": 1, "ep": 1, "dp": 1, "placement": "loop"},
        microbatches={"count": MICROBATCHES, "size": 1},
        stages=[{"stage": s, "rank": r, "layers": list(b)} for s, (b, r) in enumerate(zip(BOUNDS, ranks))],
        schedule=format_schedule(schedule), stage_costs=stage_costs_to_dict(sc),
        predicted={"step_time_s": sim.step_time, "bubble_fraction": sim.bubble_fraction, "mfu": 0.0,
                   "peak_memory_bytes": sim.peak_memory_bytes, "memory_limit_bytes": None, "busy_s": sim.busy},
        baselines={}, solver={"name": "test", "status": "FIXED", "wall_s": 0.0, "gap": None},
        costs={"source": "measured", "device": "cpu", "scale": SCALE, "seq_len": SEQ})


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("modules", ["native", "transformers"])
def test_user_model_at_profile_width_passes_the_gradient_check_with_ep_2(modules):
    from planner.replay import ReplayOptions, replay_interleaved

    if modules == "transformers":
        pytest.importorskip("transformers")
    plans = [_plan(fuse=True), _plan(fuse=False)]
    assert "OVERLAP_F_B" in str(plans[0].schedule) and "OVERLAP_F_B" not in str(plans[1].schedule)
    opts = ReplayOptions(ep=2, steps=1, warmup=0, threads=1, timeout_s=120.0, deadline_s=540.0, modules=modules)
    results = replay_interleaved(plans, opts)
    for name, res in zip(("fused", "1f1b"), results):
        rep = res.report
        assert rep["replay"]["processes"] == 4 and rep["replay"]["expert_parallel"]["ep"] == 2, name
        check = rep["grad_check"]
        assert check["passed"], (name, {k: v for k, v in check.items() if "losses" not in k})
        assert len(check["losses"]) == 2 * MICROBATCHES, name
        assert check["loss_max_abs_diff"] == 0.0, (name, check["loss_max_abs_diff"])
