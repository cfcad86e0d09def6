"""Expert parallelism and the emulated link in ``ppplan replay`` (gloo, 2 processes).

pp 1 x ep 2: the tiny Qwen3-Next-like model's MoE layers send tokens to the other
rank's experts; fused pairs run through ``planner.runtime``; gradients and losses
match the single-process reference over both ranks' batches. Bad EP inputs are one
line, exit 2, before any process starts.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_replay_run import make_plan, tiny_config  # noqa: E402  (same tests folder)

from solvers.schedule.families.generators import one_f_one_b


def _opts(**kw):
    from planner.replay import ReplayOptions

    return ReplayOptions(**{"steps": 2, "warmup": 0, "timeout_s": 30.0, "deadline_s": 240.0,
                            "threads": 1, **kw})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_expert_parallel_replay_matches_reference(tmp_path):
    from planner.replay import replay

    # (F;I) pairs with EP are covered by tests/test_runtime_overlap.py; here (F;B)
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(1, 4, fuse=True), [(0, 7)], pp=1)
    rep = replay(plan, _opts(ep=2)).report
    assert rep["replay"]["expert_parallel"]["ep"] == 2
    assert rep["replay"]["processes"] == 2
    assert rep["grad_check"]["passed"], rep["grad_check"]
    assert len(rep["grad_check"]["losses"]) == 8  # 4 microbatches x 2 EP ranks' batches
    assert len(rep["measured"]["busy_s"]) == 1


def test_ep_not_dividing_experts_is_one_line_exit_2(ppplan, tmp_path):
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(1, 4, fuse=True), [(0, 7)], pp=1)
    path = tmp_path / "plan.json"
    plan.save(path)
    out = tmp_path / "r.json"
    res = ppplan("replay", str(path), "--ep", "3", "--out", str(out))
    assert res.code == 2, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "--ep" in lines[0] and "divide" in lines[0], res.err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "1f1b"])
def test_pp2_x_ep2_replay_matches_reference(ppplan, tmp_path, fuse):
    """4 gloo processes: EP groups {0, 1} and {2, 3} (one per stage), pipeline groups {0, 2}
    and {1, 3}. torch's shape inference runs stage 1 on uninitialised inputs, which can
    route every token to one rank's experts ([Note: no tokens, same collectives]); this
    hung before. --timeout and --deadline make a hang fail instead."""
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4, fuse=fuse), [(0, 4), (4, 7)])
    path = tmp_path / "plan.json"
    plan.save(path)
    out = tmp_path / "r.json"
    res = ppplan("replay", str(path), "--ep", "2", "--threads", "1", "--steps", "1", "--warmup", "0",
                 "--timeout", "30", "--deadline", "240", "--out", str(out))
    assert res.code == 0, res.err
    rep = json.loads(out.read_text())
    assert rep["replay"]["processes"] == 4 and rep["replay"]["expert_parallel"]["ep"] == 2
    assert rep["grad_check"]["passed"], rep["grad_check"]
    assert len(rep["grad_check"]["losses"]) == 8  # 4 microbatches x 2 EP ranks' batches
    assert len(rep["measured"]["busy_s"]) == 2


def test_experts_that_receive_no_rows_stay_in_the_graph():
    """[Note: no tokens, same collectives]: the combine's backward all-to-all must run on
    every EP rank, also on one whose experts got no rows."""
    import torch

    from planner.core.model import MoeSpec
    from profiler.layers.moe import MoE

    moe = MoE(8, MoeSpec(num_experts=4, top_k=2, expert_intermediate=4))
    rows = torch.randn(5, 8, requires_grad=True)
    out = moe._run(rows[:0], [0, 0, 0, 0])
    assert out.shape == (0, 8) and out.requires_grad and out.grad_fn is not None


def test_torchrun_world_not_pp_times_ep_is_an_input_error(tmp_path, monkeypatch):
    from planner.core.errors import InputError
    from planner.replay import replay

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(1, 4, fuse=True), [(0, 7)], pp=1)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(InputError, match="WORLD_SIZE"):
        replay(plan, _opts(ep=2))


def _pair_plan(tmp_path):
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(1, 4, fuse=True), [(0, 7)], pp=1)
    path = tmp_path / "plan.json"
    plan.save(path)
    return plan, path


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", ["pair-die:1", "pair-raise:1"])
def test_fault_inside_a_fused_pair_stops_every_rank(tmp_path, fault):
    import os

    from planner.replay import ReplayFailed, replay

    plan, _ = _pair_plan(tmp_path)
    with pytest.raises(ReplayFailed, match="rank 1") as info:
        replay(plan, _opts(ep=2, fault=fault, timeout_s=5.0, deadline_s=90.0))
    for pid in info.value.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_under_torchrun_a_rank_dead_inside_a_pair_ends_the_other_within_the_timeout(tmp_path):
    """No launcher to stop it: the surviving rank's pending all-to-all fails (or times out)
    and it exits non-zero by itself."""
    import socket
    import subprocess
    import time

    _, path = _pair_plan(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "planner.cli", "replay", str(path), "--ep", "2", "--fault", "pair-die:1",
             "--timeout", "5", "--threads", "1", "--steps", "1", "--warmup", "0", "--out", str(tmp_path / "r.json")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    start = time.monotonic()
    try:
        codes = [p.wait(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes[1] == 17
    assert codes[0] != 0, procs[0].stderr.read()
    assert time.monotonic() - start < 90
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["probs", "position"])
def test_capacity_padded_ep_replay_matches_reference(tmp_path, policy):
    """Megatron's padded capacity mode (static all-to-all splits, no counts exchange) on
    pp 1 x ep 2 with fused pairs: the same drops as the single-process reference, which
    applies the same capacity to each EP rank's batch."""
    from planner.replay import replay

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(1, 4, fuse=True), [(0, 7)], pp=1)
    rep = replay(plan, _opts(ep=2, moe_expert_capacity_factor=0.75, moe_pad_expert_input_to_capacity=True,
                             moe_token_drop_policy=policy)).report
    assert rep["replay"]["moe_dispatch"] == {"mode": "padded", "moe_expert_capacity_factor": 0.75,
                                             "moe_pad_expert_input_to_capacity": True,
                                             "moe_token_drop_policy": policy}
    assert rep["grad_check"]["passed"], rep["grad_check"]


@pytest.mark.parametrize(("flags", "named"), [
    (("--moe-expert-capacity-factor", "-1"), "--moe-expert-capacity-factor"),
    (("--moe-expert-capacity-factor", "inf"), "--moe-expert-capacity-factor"),
    (("--moe-expert-capacity-factor", "1", "--moe-token-drop-policy", "random"), "--moe-token-drop-policy"),
    (("--moe-pad-expert-input-to-capacity",), "--moe-pad-expert-input-to-capacity"),
])
def test_bad_capacity_flags_are_one_line_exit_2(ppplan, tmp_path, flags, named):
    _, path = _pair_plan(tmp_path)
    out = tmp_path / "r.json"
    res = ppplan("replay", str(path), *flags, "--out", str(out))
    assert res.code == 2, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], res.err
    assert not out.exists()
