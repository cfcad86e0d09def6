"""The typed ``predicted`` and ``solver`` records (``planner.core.plan_records``): a plan read
and written again, or extended with ``dataclasses.replace``, writes the same JSON keys in
the same order, nulls and unknown keys included."""

from __future__ import annotations

import dataclasses
import json

import pytest

from planner.core.plan_records import Predicted, SolverRecord


def test_a_record_read_and_written_keeps_its_keys_order_and_nulls() -> None:
    data = {"mfu": 0.3, "step_time_s": 1.5, "extra_key": {"a": 1}, "peak_memory_bytes": [3, 4],
            "memory_limit_bytes": None}
    rec = Predicted.from_dict(data)
    assert json.dumps(rec.to_dict()) == json.dumps(data)
    assert rec.step_time_s == 1.5 and rec.peak_memory_bytes == (3, 4) and rec.other == {"extra_key": {"a": 1}}
    assert rec["peak_memory_bytes"] == [3, 4] and dict(rec) == data  # the Mapping view is the JSON form


def test_replace_keeps_the_order_read_and_appends_new_keys() -> None:
    rec = SolverRecord.from_dict({"name": "x", "status": "OPTIMAL", "wall_s": 1.0, "gap": None, "seed": 0})
    out = dataclasses.replace(rec, winner="w", status="FEASIBLE", budget={"work": 1.0})
    assert list(out.to_dict()) == ["name", "status", "wall_s", "gap", "seed", "budget", "winner"]
    assert out.status == "FEASIBLE" and out.to_dict()["gap"] is None
    assert list(out.with_other(later=1).to_dict())[-1] == "later"


def test_a_record_built_in_code_writes_the_planners_fields_even_when_none() -> None:
    rec = SolverRecord(name="x", status="FIXED", wall_s=0.0, gap=None, winner=None)
    assert rec.to_dict() == {"name": "x", "status": "FIXED", "wall_s": 0.0, "gap": None, "seed": None,
                             "partition": None, "schedule": None, "estimate_s": None, "objective": None,
                             "microbatch_search": None, "refine": None, "pins": None, "candidates": None}
    assert Predicted.from_dict({}).to_dict() == {}


def test_records_are_frozen() -> None:
    rec = Predicted.from_dict({"step_time_s": 1.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.step_time_s = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        rec["step_time_s"] = 2.0  # type: ignore[index]


def test_the_cluster_section_is_typed_and_written_as_read() -> None:
    from planner.core.plan_records import ClusterInfo, TrainingInfo

    data = {"gpu": {"name": "h100", "peak_flops": 1e15, "nvlink_bandwidth": 4.5e11}, "num_gpus": 8,
            "training": {"global_batch": 64, "seq_len": 4096, "fsdp": False, "recompute": "full"},
            "parallel": {"tp": 2}}
    cl = ClusterInfo.from_dict(data)
    assert isinstance(cl.training, TrainingInfo) and cl.settings.recompute == "full" and cl.peak_flops == 1e15
    assert json.dumps(cl.to_dict()) == json.dumps(data) and cl["training"]["fsdp"] is False
    assert ClusterInfo.from_dict({}).settings.recompute is None and ClusterInfo.from_dict({}).to_dict() == {}


def test_baselines_keep_their_nulls() -> None:
    from planner.core.plan_records import Baseline, baselines_from_dict

    data = {"uniform": {"step_time_s": None, "status": "infeasible"},
            "plan": {"step_time_s": 1.0, "schedule": "1f1b", "stages": [[0, 2]], "microbatches": 4}}
    out = baselines_from_dict(data)
    assert isinstance(out["plan"], Baseline) and out["plan"].stages == [[0, 2]] and out["uniform"].step_time_s is None
    assert json.dumps({k: b.to_dict() for k, b in out.items()}) == json.dumps(data)


def test_without_leaves_keys_out_as_if_never_written() -> None:
    from planner.core.plan_records import TrainingInfo

    tr = TrainingInfo.from_dict({"global_batch": 8, "seq_len": 128, "fsdp": True})
    out = tr.without("seq_len", "fsdp")
    assert out.to_dict() == {"global_batch": 8} and out.seq_len is None and tr.seq_len == 128
