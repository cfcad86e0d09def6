"""Recomputation chosen by the planner (``recompute: auto``): one cost table per mode,
the fastest plan that fits memory wins, and the plan records the mode it was made for."""

from __future__ import annotations

import pytest

from planner.api import plan
from planner.core.cluster import AUTO_RECOMPUTE
from planner.core.costs import CostTable, LayerCost
from planner.core.errors import InputError
from planner.planning import PlanRequest, make_plan


def _table(act: int, f_extra: float) -> CostTable:
    """Four equal layers; ``act`` bytes of activations each, ``f_extra`` recompute time in I."""
    layers = tuple(LayerCost(type="t", f=1.0, i=1.0 + f_extra, w=1.0, act_bytes=act, out_bytes=8)
                   for _ in range(4))
    return CostTable(model="toy", source="user", layers=layers)


def _req(mode: str, limit: int | None) -> PlanRequest:
    return PlanRequest(pp=2, microbatches=8, memory_limit_bytes=limit, work_s=0.2,
                       cluster={"training": {"recompute": mode}})


def test_the_faster_variant_wins_and_is_recorded():
    # without memory pressure, no recomputation is faster (it does less work)
    p = make_plan(_table(100, 0.0), _req("none", None), variants=[(_table(10, 0.5), _req("full", None))])
    assert p.cluster.settings.recompute == "none"
    modes = {e.get("recompute") for e in p.solver.candidates if "recompute" in e}
    assert modes == {"none", "full"}


def test_recomputation_wins_when_memory_binds():
    # 2 layers x 100 bytes per microbatch: a 250-byte limit fits no stage without recomputation
    none, full = (_table(100, 0.0), _req("none", 250)), (_table(10, 0.5), _req("full", 250))
    p = make_plan(*none, variants=[full])
    assert p.cluster.settings.recompute == "full"
    assert max(p.predicted.peak_memory_bytes) <= 250


@pytest.mark.slow
def test_auto_is_never_slower_than_a_fixed_mode():
    auto = plan("llama3-8b", pp=4, work=1.0)
    assert auto.cluster.settings.recompute in AUTO_RECOMPUTE
    for mode in AUTO_RECOMPUTE:
        fixed = plan("llama3-8b", pp=4, work=1.0, recompute=mode)
        assert fixed.cluster.settings.recompute == mode
        assert auto.predicted.step_time_s <= fixed.predicted.step_time_s * (1 + 1e-9)


def test_a_profile_is_planned_with_its_own_mode(tmp_path):
    from planner.core.costs_io import save_costs
    from planner.core.hf_config import load_model
    from planner.core.cluster import load_cluster, default_cluster_path
    from profiler.analytical import analytical_costs

    spec = load_model("llama3-8b")
    cl = load_cluster(default_cluster_path("llama3-8b")).with_recompute("selective")
    path = tmp_path / "costs.json"
    save_costs(analytical_costs(spec, cl), path)
    p = plan("llama3-8b", profile=path, pp=2, schedule="1f1b", work=0.5)
    assert p.cluster.settings.recompute == "selective"
    with pytest.raises(InputError, match=r"--recompute: full given but the profile was measured with selective"):
        plan("llama3-8b", profile=path, pp=2, recompute="full")
