"""``--link emulated`` on the user's path: a plan made from this machine's profile is
re-predicted with the link, whose scale makes the exchanges a stated share of the MoE
layers' time (``planner.replay.costs`` [Note: link share])."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from planner.core.costs import CostTable, LayerCost
from planner.core.errors import InputError
from planner.core.hardware import gpu_from_config
from solvers.schedule.families.generators import one_f_one_b

from test_replay_run import SEQ, make_plan, tiny_config  # noqa: E402  (same tests folder)


def _plan(tmp_path, *, ep: int = 2):
    """A plan made from a profile of this machine (exact shape), on an H100 cluster with EP."""
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    cluster = {"gpu": asdict(gpu_from_config("h100")), "num_gpus": 4,
               "training": {"global_batch": 8, "seq_len": SEQ, "micro_batch_size": 1}}
    return replace(plan, cluster=cluster, parallel={**plan.parallel, "ep": ep, "dp": 2})


def _here(rm) -> CostTable:
    """Compute times per layer as ``planner.replay.costs`` measures them (no all-to-all)."""
    layers = tuple(LayerCost(type=l.type_key, role=l.role, f=1e-3, i=2e-3, w=1e-3, b=2.5e-3) for l in rm.spec.layers)
    return CostTable(model="tiny", source="measured", layers=layers, seq_len=SEQ)


@pytest.mark.parametrize("share", [0.1, 0.3, 0.6])
def test_the_link_scale_makes_the_exchanges_the_asked_share(tmp_path, share):
    from planner.replay import ReplayOptions
    from planner.replay.costs import link_options, link_table, share_of_moe_time
    from planner.replay.lowering import replay_model

    plan = _plan(tmp_path)
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    here = _here(rm)
    opts = link_options(ReplayOptions(link="emulated", link_share=share), here, plan, rm)
    table = link_table(here, plan, rm, scale=opts.link_scale)
    assert share_of_moe_time(table) == pytest.approx(share)
    assert table.meta["link"]["share_of_moe_time"] == pytest.approx(share)


def test_the_default_share_is_the_analytical_models_on_the_plans_cluster(tmp_path):
    from planner.replay import ReplayOptions
    from planner.replay.costs import gpu_share, link_options, link_table, share_of_moe_time
    from planner.replay.lowering import replay_model

    plan = _plan(tmp_path)
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    here = _here(rm)
    opts = link_options(ReplayOptions(link="emulated"), here, plan, rm)
    assert 0 < gpu_share(plan) < 1 and opts.link_share == gpu_share(plan)
    assert share_of_moe_time(link_table(here, plan, rm, scale=opts.link_scale)) == pytest.approx(gpu_share(plan))
    # an explicit scale and the real link are left as they are
    assert link_options(ReplayOptions(link="emulated", link_scale=2.0), here, plan, rm).link_scale == 2.0
    assert link_options(ReplayOptions(), here, plan, rm).link_scale is None


def test_a_plan_without_all_to_alls_cannot_emulate_them(tmp_path):
    from planner.replay import ReplayOptions
    from planner.replay.costs import link_options
    from planner.replay.lowering import replay_model

    plan = _plan(tmp_path, ep=1)
    rm = replay_model(plan, scale=1.0, seq_len=SEQ)
    with pytest.raises(InputError, match=r"--link: the plan's model has no all-to-all to emulate \(EP 1\)"):
        link_options(ReplayOptions(link="emulated", link_share=0.3), _here(rm), plan, rm)


def test_share_and_scale_are_one_or_the_other():
    from planner.replay import ReplayOptions

    with pytest.raises(InputError, match="--link-share"):
        ReplayOptions(link="emulated", link_share=0.3, link_scale=1.0).check()
    with pytest.raises(InputError, match="--link-share"):
        ReplayOptions(link="emulated", link_share=1.0).check()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_plan_from_this_machines_profile_is_repredicted_with_the_link(tmp_path):
    from planner.replay import ReplayOptions, replay
    from planner.replay.predict import REPREDICTED
    from planner.replay.report import text_summary

    plan = _plan(tmp_path)
    opts = ReplayOptions(steps=2, warmup=0, timeout_s=30.0, deadline_s=240.0, threads=1, grad_check=False,
                         link="emulated", link_share=0.3)
    rep = replay(plan, opts).report
    p, link = rep["predicted"], rep["replay"]["expert_parallel"]
    assert p["source"] == REPREDICTED
    assert any(t["a2a_f"] > 0 and t["a2a_b"] > 0 for t in p["costs"]["layer_types"].values())
    assert link["share_of_moe_time_asked"] == 0.3 and link["share_set_by"] == "--link-share"
    # the table is measured again after the steps, so the share in it moves with the load
    assert 0.1 < link["share_of_moe_time_in_prediction"] < 0.6
    assert "(30.0% of the MoE layers' time)" in text_summary(rep)
