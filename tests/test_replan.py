"""Re-planning after routing drift: drift report, keep/replan decision, stability, migration."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from planner.api import plan as default_plan, resolve_cluster
from planner.core.costs import CostTable, LayerCost
from planner.core.costs_io import save_costs
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.plan import Plan
from planner.export import LaunchPlan
from planner.replanning import replan
from planner.replanning.costs import rescale_profile
from planner.replanning.inputs import requested_schedule
from planner.replanning.megatron_layout import megatron_layout
from planner.replanning.migration import migration
from planner.simulation import validate_plan
from profiler.analytical import analytical_costs

ROUTING = Path(__file__).resolve().parent.parent / "examples" / "routing"


@pytest.fixture(scope="module")
def base() -> Plan:
    """``ppplan plan --schedule 1f1b`` for the shipped default model and cluster (assumes
    balanced routing). A fixed family: no time-limited CP-SAT polish, so this plan and every
    re-plan of it (``replan`` keeps the family) are the same on every run."""
    return default_plan(schedule="1f1b")


@pytest.fixture(scope="module")
def start(base) -> Plan:
    """The plan re-made for the routing at the start of the run."""
    return replan(base, [ROUTING / "start.json"]).plan


@pytest.fixture(scope="module")
def roomy() -> Plan:
    """The start plan made with ``--memory-gib 64`` for a job whose limit is 72 GiB: 8 GiB of
    headroom, so routing drift changes its speed, not whether it fits (W-filled plans use
    the memory they are given, so a plan made at the job's limit no longer fits)."""
    made = replan(default_plan(schedule="1f1b", memory_gib=64), [ROUTING / "start.json"]).plan
    assert max(made.predicted.peak_memory_bytes) <= 64 * 2**30
    data = made.to_dict()
    data["predicted"]["memory_limit_bytes"] = 72 * 2**30
    return Plan.from_dict(data)


def test_balanced_trace_keeps_the_plan(start):
    res = replan(start, [ROUTING / "balanced.json"])
    assert not res.recommended and not res.migration.moves
    assert abs(res.gain) < 0.03
    assert res.plan.extra["replan"]["recommended"] is False
    assert type(res.plan) is LaunchPlan  # the type planner.plan returns ([Note: delivered plans])


def test_hot_late_layers_are_detected(start, tmp_path):
    res = replan(start, [ROUTING / "hot_late.jsonl"])
    hot = {d.layer for d in res.layers if d.now_imbalance > 1.2}
    assert hot == set(range(37, 50))
    assert all(abs(d.then_imbalance - 1.03) < 0.05 for d in res.layers)  # start.json is balanced
    slow = {s.stage: s.slowdown for s in res.stages}
    assert slow[6] > 0.2 and max(slow[s] for s in range(5)) < 0.05  # stage 6 holds layers 41..46
    assert res.old_step_s > res.then_step_s and res.new_step_s <= res.old_step_s
    rp = res.plan.extra["replan"]
    for key in ("old_step_time_s", "new_step_time_s", "gain", "moved_layers", "migration_bytes",
                "migration_s", "break_even_steps", "recommended"):
        assert key in rp
    out = tmp_path / "new.json"
    res.plan.save(out)
    assert validate_plan(out) == []


def test_hot_middle_layers_are_replanned(roomy, tmp_path):
    """The last drift iteration (layers 13-30 hot) slows the middle stages; the old plan still
    fits, and moving layers off them pays (with the analytical costs of the shipped cluster)."""
    res = replan(roomy, [ROUTING / "drift.jsonl"], window=1)
    assert {d.layer for d in res.layers if d.now_imbalance > 1.2} <= set(range(13, 31))
    assert not res.old_problem and res.recommended and res.gain >= 0.03
    assert res.new_step_s < res.old_step_s and res.gap_recovered > 0.5
    rp = res.plan.extra["replan"]
    assert {m["layer"] for m in rp["moved_layers"]} == {m.layer for m in res.migration.moves} != set()
    out = tmp_path / "new.json"
    res.plan.save(out)
    assert validate_plan(out) == []


def test_min_gain_is_hysteresis(roomy):
    res = replan(roomy, [ROUTING / "drift.jsonl"], window=1, min_gain=0.5)
    assert not res.old_problem and not res.recommended
    assert res.gain > 0.03 and "below --min-gain 50.0%" in res.reason


def test_move_penalty_prefers_moving_less(roomy):
    free = replan(roomy, [ROUTING / "drift.jsonl"], window=1, move_penalty=0.0)
    sticky = replan(roomy, [ROUTING / "drift.jsonl"], window=1, move_penalty=1.0)
    assert not free.old_problem  # the old plan still fits: moving is a choice, not a must
    assert len(sticky.migration.moves) == 0 and not sticky.recommended
    assert len(free.migration.moves) > 0 and free.new_step_s <= sticky.new_step_s


def test_replanned_plan_remembers_its_routing(start):
    res = replan(start, [ROUTING / "hot_late.jsonl"])
    again = replan(res.plan, [ROUTING / "hot_late.jsonl"])
    assert again.then_step_s == pytest.approx(again.old_step_s)
    assert not again.recommended and not again.migration.moves


def test_replan_keeps_the_schedule_family_of_the_plan(base, start):
    model = load_model("qwen3-next-80b-a3b")
    table = analytical_costs(model, resolve_cluster(model, None))
    assert requested_schedule(base, table, vpp=1, placement="loop") == "1f1b"  # chosen: 1f1b + W moves
    assert {c["schedule"] for c in start.solver.candidates} == {"1f1b"}
    data = base.to_dict()
    data["solver"]["candidates"] = [*data["solver"]["candidates"], {"microbatches": 32, "schedule": "zb-h1"}]
    assert requested_schedule(Plan.from_dict(data), table, vpp=1, placement="loop") == "auto"


def test_old_plan_out_of_memory_forces_replan(base):
    res = replan(base, [ROUTING / "start.json"])  # the default plan assumed perfect balance
    assert "peak memory" in res.old_problem and res.recommended
    assert res.then_step_s == pytest.approx(base.predicted.step_time_s)


def _table(static: list[int]) -> CostTable:
    return CostTable(model="m", source="user", layers=tuple(
        LayerCost(type="t", f=1.0, i=1.0, w=1.0, param_bytes=s, grad_bytes=0, optim_bytes=0) for s in static))


def test_migration_bytes_time_and_break_even():
    cluster = resolve_cluster(load_model("qwen3-next-80b-a3b"), None)  # pp 8, dp 8: a rank is a node
    table = _table([10, 20, 30, 40] + [0] * 47)
    old = [0, 0, 1, 1] + [7] * 47
    new = [0, 1, 1, 2] + [7] * 47  # layer 1: 0 -> 1, layer 3: 1 -> 2
    m = migration(table, cluster, old, new)
    assert [(x.layer, x.from_rank, x.to_rank) for x in m.moves] == [(1, 0, 1), (3, 1, 2)]
    assert m.total_bytes == (20 + 40) * 8
    assert m.bandwidth == cluster.gpu.ib_bandwidth
    assert m.seconds == pytest.approx(40 / cluster.gpu.ib_bandwidth + cluster.gpu.p2p_latency_s)
    assert m.break_even_steps(2.0, 2.0 - m.seconds / 4.5) == 5
    assert m.break_even_steps(2.0, 2.1) is None
    assert migration(table, cluster, old, old).seconds == 0.0


def test_profile_rescaling_matches_analytical_ratio():
    model = load_model("qwen3-next-80b-a3b")
    cluster = resolve_cluster(model, None)
    factors = [1.5 if k in (3, 4) else 1.0 for k in range(model.num_layers)]
    measured = analytical_costs(model, cluster)
    moved = rescale_profile(measured, model, cluster, factors)
    want = analytical_costs(model, cluster, imbalance=factors)
    for k in (2, 3, 4):
        assert moved.layers[k].f == pytest.approx(want.layers[k].f)
        assert moved.layers[k].a2a_f == pytest.approx(want.layers[k].a2a_f)
    for a, b in ((3, 4), (4, 2), (2, 3), (1, 1)):
        assert moved.ov(a, b) == pytest.approx(want.ov(a, b))


def test_measured_plan_needs_its_profile(base, tmp_path):
    data = base.to_dict()
    data["costs"] = {**data["costs"], "source": "measured"}
    with pytest.raises(InputError, match=r"plan\.costs\.source: the plan was made from measured costs"):
        replan(Plan.from_dict(data), [ROUTING / "start.json"])
    model = load_model("qwen3-next-80b-a3b")
    profile = tmp_path / "costs.json"
    save_costs(analytical_costs(model, resolve_cluster(model, None)), profile)
    res = replan(Plan.from_dict(data), [ROUTING / "start.json"], profile=profile)
    assert res.then_step_s == pytest.approx(base.predicted.step_time_s)


def test_bad_routing_section_in_plan(base):
    data = base.to_dict()
    data["routing"] = {"imbalance": {"0": 1.2}}
    with pytest.raises(InputError, match=r"plan\.routing\.imbalance\.0: is not an MoE layer index"):
        replan(Plan.from_dict(data), [ROUTING / "start.json"])
    with pytest.raises(InputError, match=r"--min-gain: must be >= 0"):
        replan(base, [ROUTING / "start.json"], min_gain=-1)


def test_then_traces_override_the_plan_routing(base):
    res = replan(base, [ROUTING / "hot_late.jsonl"], then=[ROUTING / "hot_late.jsonl"])
    assert all(d.then_imbalance == pytest.approx(d.now_imbalance) for d in res.layers)
    assert res.then_step_s == pytest.approx(res.old_step_s)


def test_megatron_logs_replan_like_the_single_file_trace(start, tmp_path):
    """The start plan's run writes Megatron's per-rank logs of the hot_late routing: the same
    counts, so the same drift, decision and plan as the single-file trace."""
    spec = importlib.util.spec_from_file_location("make_traces", ROUTING / "make_traces.py")
    make_traces = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_traces)
    layout = megatron_layout(start, load_model("qwen3-next-80b-a3b"))
    folder = tmp_path / "tokens_per_expert"
    make_traces.write_megatron_logs(folder, layout, make_traces.draws("hot_late", seed=0, iterations=2), seed=0)
    assert len(list(folder.iterdir())) == 64  # pp 8 x dp 8, every rank holds MoE layers
    single = replan(start, [ROUTING / "hot_late.jsonl"])
    logs = replan(start, [tmp_path], routing_format="megatron")
    assert [(d.layer, d.now_imbalance, d.now_max_vio) for d in logs.layers] == \
        [(d.layer, d.now_imbalance, d.now_max_vio) for d in single.layers]
    assert (logs.old_step_s, logs.new_step_s, logs.recommended) == (single.old_step_s, single.new_step_s,
                                                                    single.recommended)
    assert logs.plan.bounds() == single.plan.bounds() and logs.plan.schedule == single.plan.schedule
    assert logs.plan.extra["routing"]["format"] == "megatron"
