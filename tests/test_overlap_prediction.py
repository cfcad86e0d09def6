"""The re-prediction of a replay with the emulated link (``planner.replay.costs``): the link's
time per exchange and the table the replay predicts with, built on the tiny model.
Structural checks only: nothing here is timed."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest
import torch

from planner.core.costs import CostTable, LayerCost
from planner.core.hardware import gpu_from_config
from planner.replay.costs import emulated_links, link_table
from planner.replay.lowering import replay_model
from planner.replay.costs import fused_type_pairs, measure_hidden

from test_replay_run import SEQ, make_plan, tiny_config  # noqa: E402  (same tests folder)
from solvers.schedule.families.generators import one_f_one_b


def _plan(tmp_path, recompute: str, *, fuse: bool = False):
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4, fuse=fuse), [(0, 4), (4, 7)],
                     costs={"source": "analytical", "seq_len": SEQ, "microbatch_size": 1})
    cluster = {"gpu": asdict(gpu_from_config("h100")), "num_gpus": 4, "training": {"global_batch": 8, "seq_len": SEQ, "micro_batch_size": 1,
                                                         "recompute": recompute}}
    return replace(plan, cluster=cluster, parallel={**plan.parallel, "ep": 2, "dp": 2})


def _here(rm) -> CostTable:
    """Unit compute times per layer, no all-to-all: what ``planner.replay.costs`` measures."""
    layers = tuple(LayerCost(type=l.type_key, role=l.role, f=1e-3, i=2e-3, w=1e-3, b=2.5e-3) for l in rm.spec.layers)
    return CostTable(model="tiny", source="measured", layers=layers, seq_len=SEQ)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_backward_link_time_equals_the_tables_a2a_b(tmp_path, recompute):
    """Every exchange takes a2a_f / 2; a full recomputation runs the forward's two again in the
    backward, so a backward's link time is the table's a2a_b in both modes (not 1.5x it)."""
    plan = _plan(tmp_path, recompute)
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    links = emulated_links(plan, rm, scale=1.0)
    table = link_table(_here(rm), plan, rm, scale=1.0)
    moe = [k for k, l in enumerate(rm.spec.layers) if l.is_moe]
    assert moe and all(table.layers[k].a2a_f > 0 for k in moe)
    for k in moe:
        sec = links(k).seconds
        assert sec["dispatch"] + sec["combine"] == pytest.approx(table.layers[k].a2a_f)
        backward = sec["dispatch.grad"] + sec["combine.grad"]
        if recompute == "full":
            backward += sec["dispatch"] + sec["combine"]
        assert backward == pytest.approx(table.layers[k].a2a_b)


def test_link_table_keeps_measured_compute_and_hides_only_link_time(tmp_path):
    plan = _plan(tmp_path, "full")
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    here = _here(rm)
    table = link_table(here, plan, rm, scale=1.0)
    assert [(l.f, l.i, l.w, l.b) for l in table.layers] == [(l.f, l.i, l.w, l.b) for l in here.layers]
    assert table.pairs and set(table.meta["link"]["hidden_share_of_link"].values()) != {0.0}
    index = {l.type: k for k, l in enumerate(table.layers)}
    for (ta, tb), cost in table.pairs.items():
        a, b = table.layers[index[ta]], table.layers[index[tb]]
        serial = a.serial_f + b.serial_i
        assert serial - (a.a2a_f + b.a2a_b) - 1e-15 <= cost <= serial + 1e-15
        assert 0.0 <= table.meta["link"]["hidden_share_of_link"][f"{ta}|{tb}"] <= 1.0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_emulated_link_replay_repredicts_with_the_link_and_the_table_around_the_steps(tmp_path):
    """A plan made for other hardware, replayed with the emulated link: its re-prediction
    holds the link's times, and its table was measured before and after the timed steps."""
    from planner.replay import ReplayOptions, replay

    plan = _plan(tmp_path, "full", fuse=True)
    opts = ReplayOptions(steps=2, warmup=0, timeout_s=30.0, deadline_s=240.0, threads=1, scale=1.0, seq_len=SEQ,
                         link="emulated", link_scale=1.0, grad_check=False)
    report = replay(plan, opts).report
    costs = report["predicted"]["costs"]
    assert len(report["replay"]["cpu_binding"]) == 2  # [Note: core binding], one line per rank
    assert all(b.startswith(("bound to cores", "not bound")) for b in report["replay"]["cpu_binding"])
    moe = {l.type_key for l in replay_model(plan, scale=1.0, seq_len=SEQ).spec.layers if l.is_moe}
    assert all(costs["layer_types"][t]["a2a_f"] > 0 for t in moe)
    assert costs["link"]["hidden_share_of_link"]
    assert all(len(v) == 2 for v in costs["f_plus_b_before_after_s"].values())
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    measured = {f"{a}|{b}" for a, b, _ in fused_type_pairs(plan, rm)}  # [Note: pairs measured here]
    assert measured and set(costs["link"]["hidden_s_measured_here"]) == measured


def test_table_for_an_emulated_link_is_timed_through_the_link_path(tmp_path, monkeypatch):
    """``planner.replay.costs`` [Note: link path]: the layers are built with the group the replay uses."""
    import planner.replay.costs as replay_costs
    from profiler.layers.program import EmulatedLink
    from profiler.timing import Clock

    seen, real = [], replay_costs.build_stage
    monkeypatch.setattr(replay_costs, "build_stage", lambda *a, **kw: (seen.append(kw.get("ep_group")), real(*a, **kw))[1])
    zero = EmulatedLink(seconds={})
    rm = replay_model(_plan(tmp_path, "none"), scale=1.0, seq_len=SEQ)
    replay_costs.measure_layer_costs(rm, torch.device("cpu"), Clock(torch.device("cpu")), label="cpu", reps=1,
                                   ep_group=lambda k: zero)
    assert seen and all(g is not None and g(1) is zero for g in seen)


def test_fused_type_pairs_follow_the_planners_layer_pairing(tmp_path):
    """F of the j-th forward layer beside the backward of the j-th layer from the end
    (``fused_range_cost``), with the backward's kind; an unfused plan has none."""
    from planner.core.schedule import OVERLAP

    plan = _plan(tmp_path, "none", fuse=True)
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    types = [l.type_key for l in rm.spec.layers]
    expected = set()
    for actions in plan.parsed_schedule().values():
        for act in (a for a in actions if a.kind == OVERLAP):
            (fa, fb), (ba, bb) = plan.bounds()[act.sub[0].stage], plan.bounds()[act.sub[1].stage]
            expected |= {(types[f], types[b], act.sub[1].kind.value == "B")
                         for f, b in zip(range(fa, fb), reversed(range(ba, bb)))}
    assert expected and set(fused_type_pairs(plan, rm)) == expected
    assert fused_type_pairs(_plan(tmp_path, "none"), rm) == []


def test_link_table_takes_the_seconds_measured_here_over_the_carried_share(tmp_path):
    plan = _plan(tmp_path, "none", fuse=True)
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    pairs = fused_type_pairs(plan, rm)
    hidden = {p: 1e-4 * (j + 1) for j, p in enumerate(pairs)}
    table = link_table(_here(rm), plan, rm, scale=1.0, hidden=hidden)
    index = {l.type: k for k, l in enumerate(table.layers)}
    for (ta, tb, _), sec in hidden.items():
        a, b = table.layers[index[ta]], table.layers[index[tb]]
        assert table.pairs[(ta, tb)] == pytest.approx(a.serial_f + b.serial_i - sec)
        link_s = a.a2a_f + b.a2a_b
        if link_s:
            assert table.meta["link"]["hidden_share_of_link_measured_here"][f"{ta}|{tb}"] == pytest.approx(sec / link_s)


@pytest.mark.timeout(120)
def test_measured_pair_overlaps_its_halves_and_reports_each_pair(tmp_path):
    """A MoE/MoE pair over a slow emulated link, built and run as ``measure_hidden`` runs it:
    each exchange either half issues while the other runs holds a whole compute segment of
    the other half ([Note: overlap trace] in ``planner.runtime.trace``: an order of events,
    so load cannot fail it, where a threshold on the seconds hidden did); ``measure_hidden``
    gives a finite figure for the pair."""
    import math

    from planner.replay.costs import first_of_type, layer_module, sampler
    from planner.runtime.baton import run_pair
    from planner.runtime.trace import PairTrace
    from profiler.layers.program import EmulatedLink, set_wait_hook
    from profiler.timing import Clock

    cpu = torch.device("cpu")
    plan = _plan(tmp_path, "none", fuse=True)
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    moe = next(l.type_key for l in rm.spec.layers if l.is_moe)
    slow = EmulatedLink(seconds={k: 0.01 for k in ("dispatch", "combine", "dispatch.grad", "combine.grad")})
    k = first_of_type(rm)[moe]
    sample = sampler(rm, k, layer_module(rm, k, cpu, "none", slow), cpu)
    _, out, grads = sample()
    trace = PairTrace()
    run_pair(sample, lambda: torch.autograd.backward([out], grads), timeout_s=60, install=set_wait_hook,
             trace=trace)
    for party in ("F", "B"):
        assert trace.overlappable(party) and trace.exposed(party) == [], trace.to_rows()
    hid = measure_hidden(rm, [(moe, moe, True)], cpu, Clock(cpu), link=lambda _: slow, recompute="none", reps=1)
    assert math.isfinite(hid[(moe, moe, True)])


def test_pairs_measured_for_one_link_are_not_reused_for_another(tmp_path):
    """Plans whose emulated links differ (another EP, so other all-to-all times) get their own
    pair measurements; the same plan twice shares one."""
    from planner.replay import ReplayOptions
    from planner.replay.worker import _pairs_key

    plan = _plan(tmp_path, "none", fuse=True)
    other = replace(plan, parallel={**plan.parallel, "ep": 1, "dp": 4})
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    opts = ReplayOptions(link="emulated", link_scale=1.0)
    key = ("tiny", 1.0, SEQ, 1, "none")
    assert _pairs_key(plan, rm, opts, key) == _pairs_key(plan, rm, opts, key) is not None
    assert _pairs_key(plan, rm, opts, key) != _pairs_key(other, rm, opts, key)
    assert _pairs_key(plan, rm, ReplayOptions(link="real"), key) is None
