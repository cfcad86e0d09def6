"""Measured profiler on one process: split timings, memory, routing scaling, plan end to end."""

from __future__ import annotations

from dataclasses import replace
import json
import os
import subprocess
import sys

import pytest
import torch

from planner.core.costs_io import load_costs, save_costs
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from profiler.comm import fit_link
from profiler.layers import build_layer, layer_input, scaled_model
from profiler.measure import grad_seed, measure_layer
from profiler.measure_run import LayerRun, run_serial
from profiler.measure_worker import WorkerConfig, profile_rank
from profiler.measured import ProfileRequest, assemble, check_request, measured_costs
from profiler.pairs import run_overlapped
from profiler.timing import Clock, summarize

TINY = 1 / 64
CPU = Clock(torch.device("cpu"))
QWEN = "qwen3-next-80b-a3b"


def _layer(name: str, index: int, *, seq_len: int = 32):
    model = load_model(name)
    layer = model.layers[index]
    module = build_layer(model, layer, scale=TINY)
    return module, layer_input(model, layer, scale=TINY, batch=1, seq_len=seq_len)


@pytest.mark.parametrize("name,index", [(QWEN, 1), (QWEN, 4), ("deepseek-v3", 1), ("deepseek-v3", -2)])
def test_split_backward_equals_full_backward(name, index):
    module, x = _layer(name, index if index > 0 else load_model(name).num_layers + index)
    params = list(module.parameters())
    ref_x = x.clone().requires_grad_(True)
    y = module(ref_x)
    g = grad_seed(y, 0)
    y.backward(g)
    ref = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    run = LayerRun(module.program(), x, params)
    run_serial(run.forward_tasks(), CPU)
    torch.testing.assert_close(run.state["y"], y.detach())
    run_serial(run.backward_tasks(g), CPU)
    torch.testing.assert_close(run.grads["x"], ref_x.grad)            # I gives the input gradient
    assert all(p.grad is None for p in params)                       # ... and no weight gradient
    run_serial(run.weight_tasks(), CPU)
    for p, r in zip(params, ref):
        torch.testing.assert_close(p.grad, r)                         # W gives the weight gradient
        p.grad = None
    full = LayerRun(module.program(), x, params)                      # B: one pass per segment
    run_serial(full.forward_tasks(), CPU)
    run_serial(full.backward_tasks(g, full=True), CPU)
    torch.testing.assert_close(full.grads["x"], ref_x.grad)
    for p, r in zip(params, ref):
        torch.testing.assert_close(p.grad, r)


def test_overlapped_run_does_the_same_work():
    a, xa = _layer(QWEN, 1)
    b, xb = _layer(QWEN, 4)
    run_b = LayerRun(b.program(), xb, list(b.parameters()))
    run_serial(run_b.forward_tasks(), CPU)
    run_a = LayerRun(a.program(), xa, list(a.parameters()))
    t = run_overlapped(run_a.forward_tasks(), run_b.backward_tasks(grad_seed(run_b.state["y"], 0)), CPU)
    assert t > 0
    torch.testing.assert_close(run_a.state["y"], a(xa))
    assert run_b.grads["x"].shape == xb.shape


def test_layer_timings_are_positive_and_consistent():
    module, x = _layer(QWEN, 1, seq_len=64)
    lt = measure_layer(module, x, clock=CPU, warmup=1, repeats=3)
    for stat in (lt.f, lt.i, lt.w):
        assert stat.median > 0 and stat.samples == 3 and stat.cv >= 0
    assert all(0 < e <= total for e, total in zip(lt.expert, (lt.f.median, lt.i.median, lt.w.median)))
    assert lt.a2a_f.median == 0 and lt.a2a_bytes == 0                  # no group: nothing exchanged
    assert 0 < lt.act_w_bytes < lt.act_bytes
    assert lt.param_bytes == 4 * sum(p.numel() for p in module.parameters())
    assert lt.out_bytes == x.numel() * 4
    assert sum(lt.tokens_per_expert) == 64 * scaled_model(load_model(QWEN), TINY).moe.top_k


def test_embedding_has_no_input_gradient_work():
    module, ids = _layer(QWEN, 0)
    lt = measure_layer(module, ids, clock=CPU, warmup=0, repeats=2)
    assert lt.w.median > 0 and lt.i.median == 0 and lt.a2a_b.median == 0  # torch's stage 0 runs no I


def test_weight_gradients_are_timed_accumulating(monkeypatch):
    """A replay's microbatches 2..M add into existing gradients, so every timed task must
    see one (a first-microbatch W only assigns, cheaper on CPU); none is left afterwards."""
    import profiler.measure as measure

    module, x = _layer(QWEN, 1)
    params = [p for p in module.parameters() if p.requires_grad]
    seen: list[bool] = []

    def spy(tasks, clock):
        seen.append(all(p.grad is not None for p in params))
        return run_serial(tasks, clock)

    monkeypatch.setattr(measure, "run_serial", spy)
    measure_layer(module, x, clock=CPU, warmup=0, repeats=2)
    assert seen and all(seen)
    assert all(p.grad is None for p in params)


def test_summarize_and_fit():
    s = summarize([1.0, 2.0, 3.0])
    assert s.median == 2.0 and s.cv == pytest.approx(0.5)
    fit = fit_link([(0, 1e-3), (1000, 2e-3), (2000, 3e-3)])
    assert fit.latency_s == pytest.approx(1e-3) and fit.bandwidth == pytest.approx(1e6)
    flat = fit_link([(1000, 2e-3), (2000, 1e-3)])                    # noise: slope < 0
    assert flat.bandwidth > 0 and flat.latency_s >= 0


def _worker_result(model, req):
    cfg = WorkerConfig(model=model, scale=req.scale, ep=1, device="cpu", seq_len=req.seq_len,
                       micro_batch=1, warmup=0, repeats=1, seed=0, threads=1, pairs=False)
    return profile_rank(0, 1, 0, cfg, lambda label: None)


def test_routing_imbalance_scales_expert_cost():
    model = load_model(QWEN)
    req = ProfileRequest(scale=TINY, seq_len=32, repeats=1, warmup=0, measure_links=False)
    result = _worker_result(model, req)
    even = assemble(model, req, result, {})
    skewed = assemble(model, req, result, {1: 2.0})
    lt = result.layers["linear+moe"]
    assert skewed.layers[1].type == "linear+moe@1" and skewed.layers[1].imbalance == 2.0
    assert skewed.layers[1].f == pytest.approx(even.layers[1].f + lt.expert[0])
    assert skewed.layers[1].w == pytest.approx(even.layers[1].w + lt.expert[2])
    assert skewed.layers[2] == even.layers[2]
    assert skewed.layers[0].imbalance == 1.0                           # not MoE: untouched


def test_check_request_rejects_bad_input():
    model = load_model(QWEN)
    with pytest.raises(InputError, match="--device: unknown device 'tpu'"):
        check_request(model, ProfileRequest(device="tpu"))
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA device"):
            check_request(model, ProfileRequest(device="cuda"))
    with pytest.raises(InputError, match="--ep: 3 does not divide the model's 512 experts"):
        check_request(model, ProfileRequest(ep=3))
    with pytest.raises(InputError, match="scaled model's 2 experts"):
        check_request(model, ProfileRequest(ep=4, scale=1 / 256))
    with pytest.raises(InputError, match="no experts"):
        check_request(load_model("llama3-8b"), ProfileRequest(ep=2))


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "profile.json"
    req = ProfileRequest(scale=TINY, seq_len=32, repeats=2, warmup=1, measure_links=False)
    table = measured_costs(load_model(QWEN), req)
    save_costs(table, path)
    return path, table


def test_measured_profile_has_every_pair_type(tiny_profile):
    path, table = tiny_profile
    model = load_model(QWEN)
    assert table.source == "measured" and table.device == "cpu" and table.scale == TINY
    # [Note: CPU threads]: a rank's share of the cores in a two-rank replay, recorded
    assert table.meta["profiler"]["threads"] == max(1, (os.cpu_count() or 1) // 2)
    assert load_costs(path).num_layers == model.num_layers
    types = model.type_keys()
    assert set(table.meta["pairs"]) == {f"{a} / {b}" for a in types for b in types}
    for layer in table.layers:
        assert layer.f > 0 and layer.w > 0 and layer.i >= 0
    for a in range(table.num_layers):
        assert table.ov(a, a) > 0


def _ppplan(*args, cwd):
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_measured_profile_plans_end_to_end(tiny_profile, tmp_path):
    path, _ = tiny_profile
    run = _ppplan("plan", QWEN, "--profile", str(path), "--out", "plan.json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["model"]["name"] == QWEN
    val = _ppplan("validate", "plan.json", cwd=tmp_path)
    assert val.returncode == 0, val.stderr


def test_compare_shows_types_side_by_side(tiny_profile, tmp_path):
    path, _ = tiny_profile
    assert _ppplan("profile", QWEN, "--analytical", "--out", "an.json", cwd=tmp_path).returncode == 0
    run = _ppplan("profile", "--compare", "an.json", str(path), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    for t in load_model(QWEN).type_keys():
        assert t in run.stdout
    assert "hidden" in run.stdout


def _in_process(argv: list[str]) -> int:
    from planner.cli import cli
    from planner.cli.common import run_guarded

    return run_guarded(cli, argv)


def test_cli_bad_device_exits_2_with_one_line(tmp_path):
    run = _ppplan("profile", QWEN, "--device", "tpu", "--out", "p.json", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr == "error: --device: unknown device 'tpu' (use one of cpu, cuda)\n"
    assert not (tmp_path / "p.json").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args,message", [
    (["--ep", "3"], "error: --ep: 3 does not divide"),
    (["--scale", "2"], "error: Invalid value for '--scale': 2.0 is not in the range 0<x<=1"),
    (["--routing", "missing.jsonl", "--ep", "2"], "error: "),
    (["--groups", "0"], "error: Invalid value for '--groups': 0 is not in the range 1<=x<=1024"),
    (["--groups", "2", "--alone"], "error: --alone: times on one process, but --groups 2 has every group measure "
                                   "(drop --alone or use --groups 1)"),
    (["--groups", "600", "--ep", "2"], "error: --groups: --ep 2 x --groups 600 is 1200 processes, over 1024"),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "p.json"
    assert _in_process(["profile", QWEN, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    assert not out.exists()


def test_cli_routing_trace_must_match_model(tmp_path, capsys):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"iter": 1, "block": "decoder", "layer": 1, "tpe": [[1, 2, 3]]}) + "\n")
    out = tmp_path / "p.json"
    assert _in_process(["profile", QWEN, "--routing", str(trace), "--ep", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "expert" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_cli_applies_routing_trace(tmp_path):
    model = load_model(QWEN)
    moe = [layer.index for layer in model.layers if layer.is_moe]
    even = [10] * model.moe.num_experts
    hot = [30] * (model.moe.num_experts // 2) + [10] * (model.moe.num_experts // 2)  # rank 0: 3x mean/1.5
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"layers": {str(i): hot if i == moe[0] else even for i in moe}}))
    out = tmp_path / "p.json"
    argv = ["profile", QWEN, "--scale", str(TINY), "--seq-len", "32", "--repeats", "1", "--warmup", "0",
            "--no-links", "--routing", str(trace), "--trace-ep", "2", "--quiet", "--out", str(out)]
    assert _in_process(argv) == 0
    table = load_costs(out)
    first = table.layers[moe[0]]
    assert first.imbalance == pytest.approx(1.5) and first.type == f"linear+moe@{moe[0]}"
    assert all(table.layers[i].imbalance == 1.0 for i in moe[1:])
    assert "trace.json (EP 2)" in table.meta["routing"]


def test_interrupted_profile_writes_nothing(tmp_path, monkeypatch):
    import profiler.measured as measured

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(measured, "launch", interrupted)
    out = tmp_path / "p.json"
    assert _in_process(["profile", QWEN, "--scale", str(TINY), "--quiet", "--out", str(out)]) == 130
    assert list(tmp_path.iterdir()) == []


def test_pair_timer_alternates_which_runs_first_and_pairs_the_differences():
    """``profiler.pairs.alternate``: overlapped and serial each repeat, the first of the two
    alternating, warm-ups dropped; ``hidden`` is the per-repeat serial - overlapped."""
    from profiler.pairs import alternate

    calls = []
    timing = alternate(lambda o: (calls.append(o), 1.0 if o else 3.0)[1], warmup=1, repeats=3)
    assert calls == [False, True, True, False, False, True, True, False]
    assert timing.ov.samples == timing.serial.samples == 3
    assert timing.hidden.median == 2.0 and timing.ratio.median == pytest.approx(1 / 3)


def test_pair_calls_run_fused_through_the_runner_given_and_alone_one_after_the_other():
    """``profiler.pairs.time_pair_calls`` (the replay's and the overlap benchmark's pair timer):
    the backward's forward prepared untimed before each run, ``fuse`` only for the fused runs."""
    from profiler.pairs import time_pair_calls

    log = []

    def prepare():
        log.append("prepare")
        return lambda: log.append("b")
    timing = time_pair_calls(lambda: log.append("f"), prepare, fuse=lambda f, b: (log.append("fused"), f(), b()),
                             clock=CPU, repeats=2, warmup=1, reset=lambda: log.append("reset"))
    alone, fused = ["prepare", "f", "b", "reset"], ["prepare", "fused", "f", "b", "reset"]
    assert log == alone + fused + fused + alone + alone + fused
    assert timing.ov.samples == 2


def test_layer_calls_time_forward_input_weight_and_full_backward():
    """``profiler.measure.time_layer_calls``: F, torch's I and W, and the full backward B of
    one microbatch through a module called whole; a layer whose input needs no gradient (token
    ids) has no I, its whole backward in W, as torch's first stage runs it."""
    from profiler.measure import time_layer_calls

    torch.manual_seed(0)
    lin = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64))

    def sample(grad_x: bool):
        def forward():
            x = torch.randn(32, 64).requires_grad_(grad_x)
            out = lin(x)
            return x, out, [torch.ones_like(out)]
        return forward
    f, i, w, b = time_layer_calls(lin, sample(True), CPU, repeats=3)
    assert min(f, i, w, b) > 0 and all(p.grad is None for p in lin.parameters())
    f0, i0, w0, b0 = time_layer_calls(lin, sample(False), CPU, repeats=3)
    assert i0 < min(i, w0) and w0 > 0 and b0 > 0


def test_layer_repeats_run_in_rounds(monkeypatch):
    """Each round times every layer once, so no layer's median rests on one stretch of a
    drifting machine (``profiler.measure.measure_layers``)."""
    from profiler.measure import LayerSampler, measure_layers

    order: list[str] = []
    real = LayerSampler.sample
    monkeypatch.setattr(LayerSampler, "sample", lambda self, clock: (order.append(self.tag), real(self, clock))[1])
    samplers = {}
    for t, index in (("a", 1), ("b", 4)):
        module, x = _layer(QWEN, index)
        samplers[t] = LayerSampler(module, x)
        samplers[t].tag = t
    out = measure_layers(samplers, clock=CPU, warmup=1, repeats=3)
    assert order == ["a", "b"] + ["a", "b"] * 3
    assert all(out[t].f.samples == 3 and out[t].f.median > 0 for t in "ab")


def test_merge_pools_side_by_side_copies_and_keeps_the_slowest_of_a_lockstep_group():
    """At ep 1 the ranks timed copies of the same layer: one median over all their samples
    (the trace importer's statistic); an expert-parallel group waits for its slowest rank."""
    from profiler.measure_worker import _merge

    model = load_model(QWEN)
    req = ProfileRequest(scale=TINY, seq_len=16, repeats=1, warmup=0, measure_links=False)
    base = _worker_result(model, req).layers
    t = next(iter(base))

    def rank(values):
        return {t: replace(base[t], f=summarize(values))}, {}

    a, b = rank([1.0, 2.0, 3.0]), rank([10.0, 11.0, 12.0])
    assert _merge([a, b], lockstep=False)[0][t].f.median == 6.5
    assert _merge([a, b], lockstep=False)[0][t].f.samples == 6
    assert _merge([a, b], lockstep=True)[0][t].f.median == 11.0


@pytest.mark.parametrize("flags, concurrent", [([], True), (["--alone"], False)])
def test_cli_alone_times_on_one_process(tmp_path, monkeypatch, flags, concurrent):
    """``ppplan profile`` measures on every process by default ([Note: concurrent ranks]);
    ``--alone`` reaches the workers as ``concurrent=False``."""
    import profiler.measured as measured

    seen = []

    def spy(cfg, world, **kwargs):
        seen.append((cfg.concurrent, world))
        return profile_rank(0, 1, 0, replace(cfg, pairs=False), lambda label: None)

    monkeypatch.setattr(measured, "launch", spy)
    out = tmp_path / "p.json"
    argv = ["profile", QWEN, "--scale", str(TINY), "--seq-len", "16", "--repeats", "1", "--warmup", "0",
            "--quiet", "--out", str(out), *flags]
    assert _in_process(argv) == 0
    assert seen == [(concurrent, 2)]
    assert load_costs(out).meta["profiler"]["measuring_processes"] == (2 if concurrent else 1)


@pytest.mark.timeout(60)
def test_groups_merge_in_lockstep_inside_a_group_and_pool_across_groups():
    """``--groups``: ranks [g*ep, (g+1)*ep) are group g; a group keeps its slowest rank's
    timings, summed token counts and largest memory (lockstep), and the groups' results are
    pooled (every sample in one ``Stat``, rank 0's group's counts and memory, the routed-expert
    medians averaged). Four ranks of ep 2, numbers by hand."""
    from profiler.measure import LayerTiming
    from profiler.measure_worker import _merge_groups, ep_groups
    from profiler.pairs import PairTiming

    def rank(f, tokens, act, expert, ov):
        s, p = summarize(f), summarize(ov)
        layer = LayerTiming(f=s, i=s, w=s, b=s, a2a_f=s, a2a_b=s, expert=(expert,) * 4, a2a_bytes=act // 10,
                            tokens_per_expert=tokens, act_bytes=act, act_w_bytes=act, param_bytes=act, out_bytes=8)
        return {"moe": layer}, {("moe", "moe"): PairTiming(ov=p, serial=p, ratio=p, hidden=p)}

    gathered = [rank([1.0, 2.0, 3.0], (1, 2), 100, 1.0, [5.0]), rank([4.0, 5.0, 6.0], (3, 4), 300, 3.0, [2.0]),
                rank([10.0, 11.0, 12.0], (10, 0), 900, 5.0, [1.0]), rank([7.0, 8.0, 9.0], (0, 10), 50, 9.0, [6.0])]
    assert ep_groups(2, 4) == [[0, 1], [2, 3]] and ep_groups(1, 2) == [[0], [1]]
    layers, pairs = _merge_groups(gathered, ep_groups(2, 4))
    moe = layers["moe"]
    # slowest of group 0 is rank 1 (median 5 > 2), of group 1 rank 2 (11 > 8): pooled, median (6 + 10) / 2
    assert moe.f.values == moe.w.values == (4.0, 5.0, 6.0, 10.0, 11.0, 12.0)
    assert moe.f.median == 8.0 and moe.f.samples == 6
    assert moe.tokens_per_expert == (4, 6) and moe.act_bytes == moe.param_bytes == 300 and moe.a2a_bytes == 30
    assert moe.expert == (6.0,) * 4                                   # (3 + 9) / 2
    pair = pairs[("moe", "moe")]                                      # rank 0's (5 > 2), rank 3's (6 > 1)
    assert pair.ov.values == (5.0, 6.0) and pair.ov.median == 5.5
    # ep 1: one process per group, all pooled (the ep 1 default); a rank that did not measure is skipped
    solo = _merge_groups(gathered[:2], ep_groups(1, 2))[0]["moe"]
    assert solo.f.values == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0) and solo.tokens_per_expert == (1, 2)
    assert _merge_groups([gathered[0], None], ep_groups(1, 2)) == gathered[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flags, world, measuring, groups", [
    ([], 2, 2, 1), (["--ep", "2"], 2, 2, 1), (["--ep", "2", "--groups", "2"], 4, 4, 2), (["--groups", "3"], 3, 3, 3)])
def test_cli_groups_reach_the_launch_and_the_meta(tmp_path, monkeypatch, flags, world, measuring, groups):
    """``--groups G`` launches ``ep x G`` processes (at least the link benchmark's two) and the
    table's ``meta.profiler`` records ``groups`` beside ``measuring_processes``."""
    import profiler.measured as measured

    seen = []

    def spy(cfg, world, **kwargs):
        seen.append(world)
        return profile_rank(0, 1, 0, replace(cfg, pairs=False, ep=1), lambda label: None)

    monkeypatch.setattr(measured, "launch", spy)
    out = tmp_path / "p.json"
    argv = ["profile", QWEN, "--scale", str(TINY), "--seq-len", "16", "--repeats", "1", "--warmup", "0",
            "--quiet", "--out", str(out), *flags]
    assert _in_process(argv) == 0
    assert seen == [world]
    meta = load_costs(out).meta
    assert meta["processes"] == world
    assert (meta["profiler"]["measuring_processes"], meta["profiler"]["groups"]) == (measuring, groups)
