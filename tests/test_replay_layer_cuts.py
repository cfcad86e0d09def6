"""The replay's layer-by-layer backward ([Note: layer cuts]): same gradients as one backward
through the stage, and no weight-gradient walk that leaves its own layer (torch's whole-stage
W walked every layer below each parameter group: 9.7x the profiled W on the user's path)."""

from __future__ import annotations

import pytest
import torch

from planner.core.hf_config import load_model
from planner.replay.timing import LayerCuts
from planner.replay.lowering import ReplayModel, build_stage, loss_fn
from profiler.layers import scaled_model

SCALE, SEQ = 0.02, 32


def _rm() -> ReplayModel:
    spec = scaled_model(load_model("qwen3-next-80b-a3b"), SCALE)
    return ReplayModel(spec=spec, scale=SCALE, seq_len=SEQ, microbatch_size=1, microbatches=1)


def _inputs(rm: ReplayModel, start: int, end: int):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, SEQ, rm.spec.hidden, generator=gen)
    target = torch.randint(0, rm.spec.vocab, (1, SEQ), generator=gen)
    return x, target, end == rm.spec.num_layers


def _reference(rm: ReplayModel, start: int, end: int):
    stage = build_stage(rm, start, end, torch.device("cpu"))
    x, target, last = _inputs(rm, start, end)
    x.requires_grad_(True)
    out = stage(x)
    if last:
        loss_fn(out, target).backward()
    else:
        out.backward(torch.ones_like(out))
    return x.grad, {n: p.grad.clone() for n, p in stage.named_parameters() if p.grad is not None}


def _cut(rm: ReplayModel, start: int, end: int, kind: str):
    stage = build_stage(rm, start, end, torch.device("cpu"))
    cuts = LayerCuts(list(stage.layers.values()))
    x, target, last = _inputs(rm, start, end)
    x.requires_grad_(True)
    cuts.forward_chunk(0)
    out = stage(x)
    cuts.forward_done()
    kw = {"stage_output": loss_fn(out, target) if last else (out,),
          "output_grads": None if last else (torch.ones_like(out),), "input_values": [x]}
    if kind == "full":
        dx, _ = cuts.backward(0, "full", kw)
    else:
        dx, groups = cuts.backward(0, "input", kw)
        assert all(p.grad is None for p in stage.parameters())  # I computed no weight gradient
        cuts.backward(0, "weight", {"stage_output": kw["stage_output"], "param_groups": groups})
    assert not cuts.records  # nothing kept alive after the backward
    return dx[0], {n: p.grad for n, p in stage.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("bounds", [(1, 5), (47, 51)], ids=["decoder", "mtp-head-last"])
@pytest.mark.parametrize("kind", ["split", "full"])
def test_layer_cut_backward_equals_whole_stage_backward(bounds, kind):
    rm = _rm()
    ref_dx, ref = _reference(rm, *bounds)
    dx, got = _cut(rm, *bounds, kind)
    torch.testing.assert_close(dx, ref_dx, rtol=1e-4, atol=1e-6)
    assert got.keys() == ref.keys()
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=1e-4, atol=1e-6, msg=name)


def _reachable(t: torch.Tensor) -> set:
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(f for f, _ in node.next_functions)
    return seen


def test_a_layers_graph_stops_at_its_own_input():
    """What made W quadratic in the stage's depth: from the last layer's output the graph
    reached every earlier layer. With the cuts it holds only the last layer's nodes."""
    rm = _rm()
    stage = build_stage(rm, 1, 6, torch.device("cpu"))
    cuts = LayerCuts(list(stage.layers.values()))
    x, _, _ = _inputs(rm, 1, 6)
    x.requires_grad_(True)
    uncut = len(_reachable(stage(x)))
    cuts.forward_chunk(0)
    out = stage(x)
    cuts.forward_done()
    last_in = cuts.records[0][-1][0]
    alone = build_stage(rm, 5, 6, torch.device("cpu"))
    one_layer = len(_reachable(alone(last_in.detach().requires_grad_(True))))
    assert len(_reachable(out)) == one_layer < uncut / 3


def test_recording_is_off_outside_a_recorded_forward():
    rm = _rm()
    stage = build_stage(rm, 1, 3, torch.device("cpu"))
    cuts = LayerCuts(list(stage.layers.values()))
    x, _, _ = _inputs(rm, 1, 3)
    stage(x.requires_grad_(True))
    assert not cuts.records


def test_only_split_backwards_are_cut(tmp_path):
    """[Note: whole B]: a microbatch whose backward on a stage is one full B keeps the stage's
    graph whole; one with I and W there (or both kinds) is cut."""
    from planner.core.schedule import Action, ActionKind, format_schedule, parse_schedule
    from planner.replay.worker import whole_backward_chunks
    from solvers.schedule.families.generators import one_f_one_b

    from test_replay_run import make_plan, tiny_config, zero_bubble  # noqa: E402  (same tests folder)

    config = tiny_config(tmp_path)
    full = make_plan(config, one_f_one_b(2, 4), [(0, 4), (4, 7)])
    assert whole_backward_chunks(full) == {0: frozenset(range(4)), 1: frozenset(range(4))}
    fused = make_plan(config, one_f_one_b(2, 4, fuse=True), [(0, 4), (4, 7)])
    assert whole_backward_chunks(fused) == {0: frozenset(range(4)), 1: frozenset(range(4))}
    assert whole_backward_chunks(make_plan(config, zero_bubble(2, 4), [(0, 4), (4, 7)])) == {}
    mixed = parse_schedule(format_schedule(one_f_one_b(2, 4)))
    mixed[1] = [a for a in mixed[1] if not (a.kind == "B" and a.microbatch == 3)]
    mixed[1] += [Action(1, ActionKind.I, 3), Action(1, ActionKind.W, 3)]
    plan = make_plan(config, mixed, [(0, 4), (4, 7)])
    assert whole_backward_chunks(plan)[1] == frozenset({0, 1, 2})
