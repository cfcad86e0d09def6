"""Record, in your own training job, the traces ``ppplan profile --from-trace`` reads.

A Megatron-style launcher adds three things around its training loop (the lines between
``# ppplan:`` comments in ``train`` below):

1. ``label(module, index, type_key)`` on each layer module it holds: ``index`` is the
   layer's position in ppplan's model (0 the embedding, 1..N the decoder layers, N+1 the
   output head: ``planner.core.model.LayerSpec.index``) and ``type_key`` its cost-table
   type (``LayerSpec.type_key``, e.g. ``gqa+moe``); for Megatron-Core's
   ``TransformerLayer`` the index is its 1-based ``layer_number``;
2. ``annotate_forward(module)`` (F ranges) and, when the job backpropagates in one pass
   (``loss.backward()``, Megatron's 1F1B), ``annotate_backward(module)`` (B ranges); a job
   that splits the backward wraps its input- and weight-gradient calls in
   ``work_range(module, "I")`` / ``work_range(module, "W")``;
3. ``with recording(folder, rank, run) as step:`` around a few steps, ``step()`` before each
   and once after the last (the importer drops the last profiler step, as HTA does).

Run as a demo on the CPU (four steps of Llama-3-8B's layers at 3% width, one process)::

    python examples/trace_hook.py --out traces
    ppplan profile --from-trace traces --out costs.json
"""

from __future__ import annotations

import argparse

import torch

from planner.core.hf_config import load_model
from profiler.layers import build_layer, layer_input
from profiler.trace.record import annotate_backward, annotate_forward, label, recording, work_range

__all__ = ["train"]


def train(out: str, *, model: str = "llama3-8b", scale: float = 0.03, seq_len: int = 32, steps: int = 4,
          device: str = "cpu") -> None:
    """A few training steps of ``model``'s layers in one process on ``device``, traced into ``out``."""
    spec = load_model(model)
    layers = [build_layer(spec, layer, scale=scale, seed=0).to(device) for layer in spec.layers]
    # ppplan: name each layer's ranges
    for layer, module in zip(spec.layers, layers):
        label(module, layer.index, layer.type_key)
        annotate_forward(module)
        annotate_backward(module)
    # ppplan: end
    tokens = layer_input(spec, spec.layers[0], scale=scale, batch=1, seq_len=seq_len, device=device)
    run = {"model": spec.name, "scale": scale, "seq_len": seq_len, "micro_batch": 1}
    with recording(out, 0, run) as step:  # ppplan: trace these steps
        for _ in range(steps):
            step()
            x = tokens
            for module in layers:
                x = module(x)
            with work_range(layers[-1], "L"):  # ppplan: the loss, counted in the last layer's F
                loss = x.float().pow(2).mean()
            loss.backward()
        if device != "cpu":
            torch.cuda.synchronize()  # the last step's kernels inside the trace
        step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="traces")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--scale", type=float, default=0.03)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.manual_seed(0)
    train(args.out, model=args.model, scale=args.scale, steps=args.steps, device=args.device)
    print(f"wrote {args.out}/rank-0.json.gz")


if __name__ == "__main__":
    main()
