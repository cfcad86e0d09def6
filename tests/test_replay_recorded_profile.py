"""The replay reads the profile its plan was made from: the plan's ``costs`` section
records the profile's path and SHA-256, and ``ppplan replay`` finds it (from the working
directory or beside the plan), checks it and divides CPU MFU by the peak it stores;
``--profile`` overrides; a profile gone or changed is one line naming ``--profile``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from planner.core.costs_io import save_costs
from planner.core.errors import InputError
from planner.replay.device import recorded_profile

from test_replay import _table  # noqa: E402  (same tests folder)
from test_replay_peak import STORED  # noqa: E402
from test_replay_run import SEQ, tiny_config  # noqa: E402

CLUSTER = f"""gpu: h100
num_gpus: 2
parallel: {{pp: 2, tp: 1, ep: 1, dp: 1}}
training: {{global_batch: 4, seq_len: {SEQ}, micro_batch_size: 1}}
"""


def _cpu_profile(path) -> str:
    save_costs(replace(_table(7), device="cpu", seq_len=SEQ, meta={"cpu_peak": STORED}), path)
    return str(path)


def _plan(ppplan, tmp_path, profile: str = "p.json", out: str = "plan.json") -> dict:
    (tmp_path / "c.yaml").write_text(CLUSTER)
    res = ppplan("plan", tiny_config(tmp_path), "--profile", profile, "--cluster", "c.yaml", "--pp", "2",
                 "--microbatches", "4", "--quiet", "--out", out)
    assert res.code == 0, res.err
    return json.loads((tmp_path / out).read_text())


def test_a_plan_records_its_profile_path_and_hash(ppplan, tmp_path):
    _cpu_profile(tmp_path / "p.json")
    costs = _plan(ppplan, tmp_path)["costs"]
    assert costs["profile"] == "p.json" and costs["device"] == "cpu"
    assert costs["profile_sha256"] == hashlib.sha256((tmp_path / "p.json").read_bytes()).hexdigest()
    res = ppplan("plan", "--profile", "p.json", "--pp", "2", "--microbatches", "4", "--quiet", "--out", "byo.json")
    assert res.code == 0, res.err  # bring your own costs: the same record
    assert json.loads((tmp_path / "byo.json").read_text())["costs"]["profile"] == "p.json"
    assert "profile" not in _analytical_costs(ppplan, tmp_path)


def _analytical_costs(ppplan, tmp_path) -> dict:
    assert ppplan("plan", "llama3-8b", "--pp", "2", "--quiet", "--out", "a.json").code == 0
    return json.loads((tmp_path / "a.json").read_text())["costs"]


def test_the_recorded_profile_is_found_from_here_or_beside_the_plan(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    _cpu_profile(tmp_path / "runs" / "p.json")
    digest = hashlib.sha256((tmp_path / "runs" / "p.json").read_bytes()).hexdigest()
    costs = {"device": "cpu", "profile": "p.json", "profile_sha256": digest}
    monkeypatch.chdir(tmp_path)
    assert recorded_profile(costs, "runs/plan.json") == "runs/p.json"  # beside the plan
    monkeypatch.chdir(tmp_path / "runs")
    assert recorded_profile(costs, "elsewhere/plan.json") == "p.json"  # from the working directory
    assert recorded_profile({**costs, "device": "NVIDIA H200"}, "plan.json") is None  # no CPU peak to read
    assert recorded_profile({"device": "cpu"}, "plan.json") is None  # an analytical or older plan


def test_a_recorded_profile_gone_or_changed_is_refused_naming_profile(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    costs = {"device": "cpu", "profile": "p.json", "profile_sha256": "0" * 64}
    with pytest.raises(InputError, match=r"^--profile: the plan's profile p.json is gone .*beside plan.json"):
        recorded_profile(costs, "plan.json")
    _cpu_profile(tmp_path / "p.json")
    with pytest.raises(InputError, match=r"^--profile: the plan's profile p.json changed since the plan was made"):
        recorded_profile(costs, "plan.json")


def test_replay_refuses_a_changed_profile_in_one_line_and_profile_overrides(ppplan, tmp_path, monkeypatch):
    import planner.replay
    from planner.replay import ReplayFailed

    _cpu_profile(tmp_path / "p.json")
    _plan(ppplan, tmp_path)
    with (tmp_path / "p.json").open("a") as f:
        f.write("\n")
    res = ppplan("replay", "plan.json", "--out", "r.json")
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1, res.err
    assert res.err.startswith("error: --profile: the plan's profile p.json changed") and not (tmp_path / "r.json").exists()
    seen = []

    def stop(plans, opts):
        seen.append(opts.profile)
        raise ReplayFailed("stopped by the test")

    monkeypatch.setattr(planner.replay, "replay_interleaved", stop)
    _cpu_profile(tmp_path / "other.json")
    assert ppplan("replay", "plan.json", "--profile", "other.json", "--out", "r.json").code == 3
    assert seen == ["other.json"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_profile_plan_replay_reports_mfu_without_profile_again(ppplan, tmp_path):
    """The documented path, at the replay tests' smallest size (the tiny Qwen3-Next config,
    full width, seq 16): ``measured.mfu`` is a number, divided by the profile's own peak."""
    cfg = tiny_config(tmp_path)
    res = ppplan("profile", cfg, "--device", "cpu", "--scale", "1", "--seq-len", str(SEQ), "--repeats", "1",
                 "--warmup", "0", "--threads", "1", "--no-links", "--quiet", "--out", "p.json")
    assert res.code == 0, res.err
    _plan(ppplan, tmp_path)
    res = ppplan("replay", "plan.json", "--steps", "2", "--warmup", "0", "--threads", "1", "--no-grad-check",
                 "--out", "r.json")
    assert res.code == 0, res.err
    measured = json.loads((tmp_path / "r.json").read_text())["measured"]
    assert isinstance(measured["mfu"], float) and measured["mfu"] > 0
    assert measured["peak_flops_source"].startswith("measured CPU peak stored in profile p.json")
