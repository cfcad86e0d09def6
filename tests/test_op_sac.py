"""torchtitan's per-op selective checkpointing (``recompute: op``): what it keeps, what it
costs, where it runs and where it is refused."""

from __future__ import annotations

import pytest
import torch

from planner.api import plan as api_plan
from planner.core.errors import InputError
from planner.core.op_sac import KEPT, MATMULS, op_layer
from profiler.analytical import analytical_costs
from tests.test_analytical import _setup

H, Q, KV, HEADS, FFN = 4096, 4096, 1024, 32, 14336  # Llama 3.1 8B


def test_the_policy_keeps_the_odd_matmuls_of_torchtitans_block():
    assert MATMULS == ("wq", "wk", "wv", "wo", "w1", "w3", "w2")
    assert KEPT == ("wq", "wv", "w1", "w2")


def test_llama3_8b_keeps_input_odd_matmuls_and_attention_per_token():
    # block input + wq + wv + w1 + w2 + attention output + its FP32 log-sum-exp (two BF16 elements a head)
    assert op_layer(hidden=H, q=Q, kv=KV, heads=HEADS, ffn=FFN, tp=1).kept_per_token == H + Q + KV + FFN + H + Q + 2 * HEADS
    # tensor parallel: sharded input and column outputs, whole-width row outputs, two reduce-scatter outputs
    tp8 = op_layer(hidden=H, q=Q, kv=KV, heads=HEADS, ffn=FFN, tp=8)
    assert tp8.kept_per_token == H / 8 + Q / 8 + KV / 8 + FFN / 8 + H + Q / 8 + 2 * HEADS / 8 + 2 * H / 8
    assert tp8.gathers_again and tp8.recomputed == ("wk", "wo", "w3")


def _decoder(model: str, mode: str):
    spec, cluster = _setup(model)
    table = analytical_costs(spec, cluster.with_recompute(mode))
    return next(lc for lc in table.layers if lc.role == "decoder"), cluster


def test_op_keeps_between_selective_and_full_and_recomputes_in_the_input_gradient():
    none, cluster = _decoder("llama3-8b", "none")
    op, _ = _decoder("llama3-8b", "op")
    sel, _ = _decoder("llama3-8b", "selective")
    full, _ = _decoder("llama3-8b", "full")
    tokens = cluster.training.micro_batch_size * cluster.training.seq_len
    kept = op_layer(hidden=H, q=Q, kv=KV, heads=HEADS, ffn=FFN, tp=cluster.parallel.tp).kept_per_token
    assert op.act_bytes == pytest.approx(tokens * kept * 2)
    assert full.act_bytes < op.act_bytes < sel.act_bytes < none.act_bytes
    # the recomputed rest of one layer lives through its backward
    assert op.work_bytes == pytest.approx(none.act_bytes - op.act_bytes)
    assert op.f == pytest.approx(none.f) and op.w == pytest.approx(none.w)
    assert none.i < op.i < full.i


def test_the_runtime_keeps_every_second_matmul_and_gives_the_same_gradients(monkeypatch):
    import torch.utils.checkpoint as ckpt

    from planner.core.hf_config import load_model
    from planner.runtime import apply_recompute
    from profiler.layers import build_layer

    spec = load_model("llama3-8b")
    layer_spec = next(layer for layer in spec.layers if layer.role == "decoder")
    decisions: list[tuple[str, bool]] = []
    real = ckpt.create_selective_checkpoint_contexts

    def spy(policy, *args, **kwargs):
        def recorded(ctx, func, *a, **k):
            out = policy(ctx, func, *a, **k)
            if not ctx.is_recompute:
                decisions.append((str(func), out == ckpt.CheckpointPolicy.MUST_SAVE))
            return out
        return real(recorded, *args, **kwargs)

    monkeypatch.setattr(ckpt, "create_selective_checkpoint_contexts", spy)
    grads = {}
    for mode in ("none", "op"):
        torch.manual_seed(0)
        layer = build_layer(spec, layer_spec, scale=1 / 64, ep_group=None, seed=0)
        apply_recompute([layer], mode)
        x = torch.randn(2, 16, layer_spec_hidden(layer), requires_grad=True)
        layer(x).float().square().mean().backward()
        grads[mode] = [x.grad.clone(), *(p.grad.clone() for p in layer.parameters())]
    for a, b in zip(grads["none"], grads["op"], strict=True):
        torch.testing.assert_close(a, b)
    mms = [keep for func, keep in decisions if func == "aten.mm.default"]
    assert mms and mms == [i % 2 == 0 for i in range(len(mms))]  # 1st, 3rd, ... kept
    assert any(keep for func, keep in decisions if "scaled_dot_product" in func)


def layer_spec_hidden(layer: torch.nn.Module) -> int:
    """The scaled layer's hidden width (its first weight's input width)."""
    return next(p for p in layer.parameters() if p.dim() == 2).shape[1]


def test_op_is_refused_where_its_matmul_order_is_not_described():
    with pytest.raises(InputError, match="training.recompute.*GQA attention with a dense MLP.*moe"):
        api_plan("qwen3-30b-a3b", recompute="op", work=0.5)


@pytest.mark.parametrize("target", ["megatron", "deepspeed"])
def test_targets_without_the_policy_refuse_op(target):
    with pytest.raises(InputError, match="--recompute.*has no op"):
        api_plan("llama3-8b", target=target, recompute="op", work=0.5)


def test_torchtitan_refuses_selective_and_names_op():
    with pytest.raises(InputError, match="SelectiveAC is its per-op policy.*--recompute op"):
        api_plan("llama3-8b", target="torchtitan", recompute="selective", work=0.5)


def test_exports_without_the_policy_refuse_an_op_plan():
    from planner.export import ExportError
    from planner.export.deepspeed import checkpoint_interval
    from planner.export.megatron_flags import recompute_settings

    plan = api_plan("llama3-8b", recompute="op", work=0.5)
    assert plan.cluster.settings.recompute == "op"
    with pytest.raises(ExportError, match="per-op policy"):
        recompute_settings(plan)
    with pytest.raises(ExportError, match="recomputes selectively"):
        checkpoint_interval(plan)


def test_a_selective_plan_is_not_exported_as_torchtitans_selective_ac(tmp_path):
    from planner.export import ExportError, export_plan

    plan = api_plan("llama3-8b", recompute="selective", work=0.5)
    with pytest.raises(ExportError, match="SelectiveAC does not run.*--recompute op"):
        export_plan(plan, "torchtitan", out=tmp_path / "tt.py")
    assert not (tmp_path / "tt.py").exists()
    op = api_plan("llama3-8b", recompute="op", work=0.5)
    assert export_plan(op, "torchtitan", out=tmp_path / "tt.py").summary["activation_checkpoint"] == "SelectiveAC"


def test_the_cli_plans_op(tmp_path):
    from click.testing import CliRunner

    from planner.cli import cli

    out = tmp_path / "plan.json"
    res = CliRunner().invoke(cli, ["plan", "llama3-8b", "--recompute", "op", "--work", "0.5", "--quiet", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert '"recompute": "op"' in out.read_text()


def test_an_op_plan_runs_each_backward_whole():
    plan = api_plan("llama3-8b", pp=2, recompute="op", global_batch=8, work=0.5)
    kinds = {a.kind.value for r in range(plan.pp) for a in plan.actions(r)}
    assert kinds == {"F", "B"}  # torch's selective checkpointing allows one backward per region
    with pytest.raises(InputError, match="--schedule.*zb-h1 splits or moves the weight gradient"):
        api_plan("llama3-8b", pp=2, recompute="op", schedule="zb-h1", work=0.5)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_op_plan_replays_with_the_single_process_gradients(tmp_path):
    import json
    import subprocess
    import sys

    path = tmp_path / "plan.json"
    api_plan("llama3-8b", pp=2, recompute="op", global_batch=8, work=0.5).save(path)
    out = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "replay", str(path), "--scale", "0.03125",
                          "--seq-len", "32", "--steps", "1", "--warmup", "0", "--threads", "1", "--timeout", "60",
                          "--out", str(out)], capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stderr
    rep = json.loads(out.read_text())
    assert rep["grad_check"]["passed"] is True and rep["grad_check"]["loss_max_abs_diff"] == 0.0
