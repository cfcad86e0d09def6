"""Profiler across a 2-process gloo group on 127.0.0.1: real all-to-alls, links, overlapped pairs."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace

import pytest
import torch
import torch.distributed as dist

from planner.core.hf_config import load_model
from profiler.layers import build_layer, layer_input
from profiler.measure_launch import ProfilingError, free_port
from profiler.measured import ProfileRequest, measured_costs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TINY = 1 / 64
QWEN = "qwen3-next-80b-a3b"


def _ep_layer_rank(rank: int, port: int, out) -> None:
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        torch.set_num_threads(1)
        model = load_model(QWEN)
        layer = model.layers[4]
        module = build_layer(model, layer, scale=TINY, ep_group=dist.group.WORLD)
        x = layer_input(model, layer, scale=TINY, batch=1, seq_len=24, seed=rank).requires_grad_(True)
        y = module(x)
        y.square().sum().backward()
        # numpy arrays travel by value; a tensor travels as a shared-memory handle that the
        # parent can no longer open once this process has exited
        out.put((rank, y.detach().numpy().copy(), x.grad.numpy().copy(), module.moe.local_experts))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out.put((rank, repr(exc), None, None))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_expert_parallel_layer_matches_local_layer():
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_ep_layer_rank, args=(r, port, out), daemon=True) for r in range(2)]
    try:
        for p in procs:
            p.start()
        results = sorted((out.get(timeout=120) for _ in procs), key=lambda r: r[0])
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    model = load_model(QWEN)
    layer = model.layers[4]
    local = build_layer(model, layer, scale=TINY)
    for rank, y, grad, local_experts in results:
        assert not isinstance(y, str), y
        y, grad = torch.from_numpy(y), torch.from_numpy(grad)
        assert local_experts == local.moe.local_experts // 2
        x = layer_input(model, layer, scale=TINY, batch=1, seq_len=24, seed=rank).requires_grad_(True)
        ref = local(x)
        ref.square().sum().backward()
        torch.testing.assert_close(y, ref.detach(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(grad, x.grad, rtol=1e-4, atol=1e-4)


def test_two_process_profile_measures_all_to_all_and_pairs():
    model = load_model(QWEN)
    req = ProfileRequest(scale=TINY, ep=2, seq_len=32, repeats=2, warmup=1, timeout_s=240)
    table = measured_costs(model, req)
    assert multiprocessing.active_children() == []                    # no orphans
    assert table.meta["processes"] == 2 and table.meta["profiler"]["ep"] == 2
    moe = [lc for lc in table.layers if lc.role == "decoder"]
    assert all(lc.a2a_f > 0 and lc.a2a_b > 0 for lc in moe)
    assert all(lc.a2a_f == 0 for lc in table.layers if lc.role in ("embedding", "head"))
    assert table.p2p.latency_s >= 0 and table.p2p.bandwidth > 0
    assert table.meta["a2a_fit"]["bandwidth"] > 0
    types = model.type_keys()
    rows = table.meta["pairs"]
    assert set(rows) == {f"{a} / {b}" for a in types for b in types}
    for row in rows.values():
        assert row["ov"] > 0 and row["serial"] > 0 and row["hidden_share"] < 1
    # every layer pair of the table resolves to a measured pair type
    for a in range(table.num_layers):
        for b in (0, a, table.num_layers - 1):
            key = (table.layers[a].type, table.layers[b].type)
            assert key in table.pairs


def test_timeout_stops_every_process():
    req = ProfileRequest(scale=TINY, ep=2, seq_len=32, repeats=1, warmup=0, timeout_s=1.0)
    with pytest.raises(ProfilingError, match="did not finish within 1 s"):
        measured_costs(load_model(QWEN), req)
    assert multiprocessing.active_children() == []


def _launch(concurrent: bool):
    from profiler.measure_launch import launch
    from profiler.measure_worker import WorkerConfig

    cfg = WorkerConfig(model=load_model(QWEN), scale=TINY, ep=1, device="cpu", seq_len=16, micro_batch=1,
                       warmup=0, repeats=2, seed=0, threads=1, pairs=True, timeout_s=120, concurrent=concurrent)
    return launch(cfg, 2, timeout_s=240)


def test_both_processes_measure_at_ep_1_unless_alone():
    """[Note: concurrent ranks]: at ep 1 the second process measures too and rank 0 returns
    the samples of both (each timing holds 2 x 2 repeats); alone, rank 0's 2."""
    together, alone = _launch(True), _launch(False)
    assert multiprocessing.active_children() == []
    for result, n in ((together, 4), (alone, 2)):
        for t in result.layers.values():
            assert t.f.samples == t.w.samples == t.b.samples == len(t.f.values) == n
        assert all(p.ov.samples == p.ratio.samples == n for p in result.pairs.values())


def _grouped(monkeypatch, groups: int):
    """``measured_costs`` at ep 2 with ``groups`` groups (no pairs, to be quick): the table and
    rank 0's merged ``WorkerResult``."""
    import profiler.measured as measured

    seen = []
    real = measured.launch

    def spy(cfg, world, **kwargs):
        seen.append(real(replace(cfg, pairs=False), world, **kwargs))
        return seen[-1]

    monkeypatch.setattr(measured, "launch", spy)
    req = ProfileRequest(scale=TINY, ep=2, groups=groups, seq_len=16, repeats=2, warmup=0, timeout_s=240)
    table = measured_costs(load_model("qwen3-30b-a3b"), req)
    return table, seen[0]


@pytest.mark.timeout(300)
def test_groups_measure_side_by_side_and_pool_their_lockstep_timings(monkeypatch):
    """``--ep 2 --groups 2``: four processes, two expert-parallel groups each timing its own
    copy in lockstep; rank 0's merged timings hold both groups' samples (2 x 2 repeats against
    2 with one group), the meta records both, and the all-to-all fit stays one group's of 2
    ranks (each size's bytes leave a rank as (P - 1) / P of it: 1/2, not 3/4)."""
    from profiler.comm import DEFAULT_SIZES

    tables = {g: _grouped(monkeypatch, g) for g in (1, 2)}
    assert multiprocessing.active_children() == []
    for g, n in ((1, 2), (2, 4)):
        table, result = tables[g]
        assert table.meta["processes"] == n
        assert table.meta["profiler"]["groups"] == g and table.meta["profiler"]["measuring_processes"] == n
        for t in result.layers.values():
            assert t.f.samples == t.i.samples == t.b.samples == t.a2a_f.samples == len(t.f.values) == 2 * g
        assert [b for b, _ in table.meta["a2a_fit"]["points"]] == [s // 2 for s in DEFAULT_SIZES]
        assert table.p2p.bandwidth > 0
    moe = [lc for lc in tables[2][0].layers if lc.role == "decoder"]
    assert all(lc.a2a_f > 0 and lc.a2a_b > 0 for lc in moe)
