"""The round trip as a test: every configuration of the seeded grid (tests/round_trip_grid.py)
through ``ppplan plan``, ``validate``, ``simulate`` and ``export``, each output checked by the
next step and by the frameworks' own loaders (tests/round_trip.py says what passes).

The whole grid is one ``slow`` test per configuration (still run by CI); a failure prints the
commands that reproduce it. The tests below it check the grid's coverage, and that the round
trip itself catches a broken step: a prediction one ulp off, a Megatron layout one layer
off, a DeepSpeed partition moved, a torch CSV with two actions swapped, a torchtitan schedule
whose placement is not the plan's.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from round_trip import run_config
from round_trip_grid import AXES, DRAWN, FIELD_EDITS, GRID, LATE_AXES, Config, draw


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("config", GRID, ids=lambda c: c.name)
def test_round_trip(config, tmp_path):
    outcome = run_config(config, tmp_path)
    assert outcome.kind != "failing", outcome.report()


def test_grid_covers_every_value_of_every_axis():
    drawn = draw()
    assert drawn == draw() and len(GRID) >= DRAWN >= 300
    assert len({c.name for c in GRID}) == len(GRID)
    for axis, values in {**AXES, **LATE_AXES}.items():
        seen = Counter(dict(c.axes)[axis] for c in drawn)
        assert {v: seen[v] for v in values if seen[v] < 5} == {}, axis


def test_grid_has_degree_searches_profiles_and_both_limit_forms():
    plans = [c.plan for c in GRID]
    assert sum("--gpus" in p for p in plans) >= 3 and sum("--profile" in p for p in plans) >= 6
    limits = [p[p.index("--memory-limit") + 1] for p in plans if "--memory-limit" in p]
    assert any(x.endswith("microbatches") for x in limits) and any(x.endswith(("GiB", "GB")) for x in limits)


def test_grid_has_the_options_of_later_rounds():
    """Each option added after the first grid is on some command line, by hand and in the draw."""
    plans = [c.plan for c in GRID]
    for option in ("--layout", "--keep-layout", "--devices", "--inter-site-latency-ms", "--offload",
                   "--recompute-modules"):
        assert sum(option in p for p in plans) >= 3, option
    assert any("--devices-order" in p and "search" in p for p in plans)
    assert any("--sites" in p and "--inter-site-gbps" in p and "--gpus" in p for p in plans)
    assert any("--gpus" in p and "--offload" not in p and "megatron" in p for p in plans)  # last round's bug
    edited = {key for c in GRID for key, _ in c.cluster}
    for key in ("training.cp_comm_type", "training.cuda_graph_scope", "training.fp8_recipe", "training.param_dtype",
                "training.grad_reduce_in_fp32"):
        assert key in edited, key
    assert {k for e in FIELD_EDITS.values() for k, _ in e} <= edited
    assert any(dict(c.cluster).get("training.fp8_recipe") == "torchao_rowwise" for c in GRID)
    assert any(dict(c.cluster).get("training.grad_reduce_in_fp32") is False for c in GRID)


_MEGATRON = Config(name="guard-megatron", plan=("llama3-8b", "--target", "megatron", "--schedule", "1f1b"))
_DEEPSPEED = Config(name="guard-deepspeed", plan=("llama3-8b", "--pp", "2", "--target", "deepspeed"))
_TORCH = Config(name="guard-torch", plan=("llama3-8b", "--pp", "2", "--schedule", "1f1b"))
_TITAN_V = Config(name="guard-torchtitan", plan=("llama3-8b", "--pp", "2", "--vpp", "2", "--placement", "v",
                                                 "--schedule", "zbv", "--target", "torchtitan"))


def test_guard_configurations_pass_unbroken(tmp_path):
    for config in (_MEGATRON, _DEEPSPEED, _TITAN_V):
        (tmp_path / config.name).mkdir()
        outcome = run_config(config, tmp_path / config.name)
        assert outcome.kind == "planned", outcome.report()
        assert {"megatron", "deepspeed", "torchtitan"} & set(outcome.checks)


def test_a_prediction_one_ulp_off_fails(tmp_path, monkeypatch):
    import planner.simulation as simulation

    real = simulation.simulate

    def off_by_one_ulp(*args, **kwargs):
        sim = real(*args, **kwargs)
        object.__setattr__(sim, "step_time", math.nextafter(sim.step_time, math.inf))
        return sim

    monkeypatch.setattr(simulation, "simulate", off_by_one_ulp)
    outcome = run_config(_TORCH, tmp_path)
    assert outcome.kind == "failing" and "ppplan simulate step_time_s" in outcome.detail, outcome.report()


def test_a_megatron_layout_one_layer_off_fails(tmp_path, monkeypatch):
    import planner.export.megatron as megatron

    real = megatron.stage_letters

    def one_layer_moved(plan):  # stage 1's first decoder layer written into stage 0
        letters = real(plan)
        return [letters[0] + "t", letters[1][1:], *letters[2:]]

    monkeypatch.setattr(megatron, "stage_letters", one_layer_moved)
    outcome = run_config(_MEGATRON, tmp_path)
    assert outcome.kind == "failing" and "Megatron's parse of layout" in outcome.detail, outcome.report()


def test_a_deepspeed_partition_moved_fails(tmp_path, monkeypatch):
    import planner.export.deepspeed as deepspeed

    real = deepspeed.deepspeed_parts
    monkeypatch.setattr(deepspeed, "deepspeed_parts", lambda plan: [p + (0 < k < len(real(plan)) - 1)
                                                                     for k, p in enumerate(real(plan))])
    outcome = run_config(_DEEPSPEED, tmp_path)
    assert outcome.kind == "failing" and "DeepSpeed PipelineModule on rank 0" in outcome.detail, outcome.report()


def test_a_torch_csv_with_two_actions_swapped_fails(tmp_path, monkeypatch):
    import planner.export.pipelining as pipelining

    real = pipelining.torch_csv

    def swapped(plan, *, fmt="torch-csv"):
        rows = real(plan, fmt=fmt).splitlines()
        cells = rows[0].split(",")
        cells[0], cells[1] = cells[1], cells[0]
        return "\n".join([",".join(cells), *rows[1:]]) + "\n"

    monkeypatch.setattr(pipelining, "torch_csv", swapped)
    outcome = run_config(_TORCH, tmp_path)
    assert outcome.kind == "failing" and "--format torch-csv" in outcome.detail, outcome.report()


def test_a_torchtitan_schedule_with_the_wrong_placement_fails(tmp_path, monkeypatch):
    import planner.export.pipelining as pipelining

    monkeypatch.setattr(pipelining, "torchtitan_schedule_name", lambda plan: "Interleaved1F1B")  # loop, not V
    outcome = run_config(_TITAN_V, tmp_path)
    assert outcome.kind == "failing" and "torchtitan's placement" in outcome.detail, outcome.report()
