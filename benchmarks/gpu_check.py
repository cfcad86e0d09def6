"""GPU check (issue 16): every CUDA path one GPU allows, in one process, one JSON file.

For Qwen3-Next-80B-A3B and DeepSeek-V3, on one GPU (one H200: budget 8 minutes):

1. *measured profile on cuda* of every layer type (``profiler.measure_worker.measure_types``:
   F, I, W per segment, and every type pair overlapped and serial), at full width where
   memory allows (``_pick_scale``: the largest of 1, 1/2, 1/4, ... whose layer types, FP32
   weights and gradients, fit in ``MEMORY_SHARE`` of the GPU). NCCL refuses two ranks on
   one GPU, so the expert-parallel all-to-all is a ``SideStreamLink``: a device-to-device
   copy of the same bytes on a side stream, which costs memory bandwidth and can
   overlap compute the way NCCL's own stream would (every figure it feeds is labelled);
2. *plans* from that profile: the overlap-aware partition and the serially balanced one
   (``ppplan plan --profile --partition overlap|serial --schedule 1f1b-overlap``);
3. *fused-pair timings of their stages* (``profiler.pairs.measure_stage_pairs``): for
   each stage, F of layer s+j beside I of layer e-1-j, overlapped and serial, summed
   over the stage, beside what the table predicts for the stage (sum of OV, sum of
   serial pairs);
4. ``ppplan simulate`` of both plans (``planner.simulation.simulate_plan``: the plans'
   stage costs are the measured profile's);
5. the *analytical* profile of the same layer types (the model's shipped cluster, full
   width, BF16 peak) beside the measured one.

``--dry-run`` runs the same code on the CPU at a tiny width (a test runs it in CI).

    python benchmarks/gpu_check.py --out benchmarks/results/gpu_check_h200.json
    python benchmarks/gpu_check.py --dry-run --out /tmp/gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

# benchmarks/profiler.py would shadow the ``profiler`` package: drop the script's folder.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

MODELS = ("qwen3-next-80b-a3b", "deepseek-v3")
SCALES = (1.0, 0.5, 0.25, 0.125, 0.0625)
MEMORY_SHARE = 0.4
"""Share of the GPU's free memory the layer types' weights + gradients may take (the rest:
activations of a pair, the allocator's slack)."""
LINK_LABEL = ("EMULATED expert-parallel link: each all-to-all is a device-to-device copy of the same "
              "bytes on a side stream (one process, one GPU)")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What one run measures."""

    device: str
    """cuda, or cpu for the dry run."""
    scale: float | None
    """Width scale (None: the largest that fits, ``_pick_scale``)."""
    seq_len: int
    """Tokens per sequence (micro-batch 1)."""
    warmup: int
    """Untimed runs per measurement."""
    repeats: int
    """Timed runs per measurement."""
    pp: int
    """Pipeline stages of the plans."""
    microbatches: int
    """Microbatches of the plans."""
    time_limit: float
    """``ppplan plan --time-limit``."""


GPU = Settings(device="cuda", scale=None, seq_len=4096, warmup=1, repeats=5, pp=4, microbatches=8, time_limit=10.0)
DRY = Settings(device="cpu", scale=0.01, seq_len=16, warmup=1, repeats=1, pp=2, microbatches=4, time_limit=0.5)


def _type_bytes(model: Any, scale: float) -> int:
    """FP32 weights + gradients of one layer per type at ``scale`` (the MTP layer's LM head included)."""
    from planner.core.layer_math import layer_params
    from profiler.layers import scaled_model
    from profiler.measure_worker import representatives

    spec = scaled_model(model, scale)
    total = 0
    for layer in representatives(model).values():
        total += layer_params(layer, spec).total + (spec.vocab * spec.hidden if layer.role == "mtp" else 0)
    return 2 * 4 * total


def _pick_scale(model: Any, settings: Settings) -> float:
    if settings.scale is not None:
        return settings.scale
    import torch

    free, _ = torch.cuda.mem_get_info()
    return next((s for s in SCALES if _type_bytes(model, s) <= MEMORY_SHARE * free), SCALES[-1])


def _profile(model: Any, scale: float, settings: Settings):
    """Measured cost table and the modules it timed (one process, side-stream link)."""
    import torch

    from profiler.layers.program import SideStreamLink
    from profiler.measure_worker import WorkerConfig, WorkerResult, measure_types
    from profiler.measured import ProfileRequest, assemble

    device = torch.device(settings.device)
    cfg = WorkerConfig(model=model, scale=scale, ep=1, device=settings.device, seq_len=settings.seq_len,
                       micro_batch=1, warmup=settings.warmup, repeats=settings.repeats, seed=0,
                       threads=torch.get_num_threads())
    group = SideStreamLink() if model.moe is not None else None
    t0 = time.perf_counter()
    layers, pairs, built = measure_types(cfg, device, group, lambda label: None)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    req = ProfileRequest(device=settings.device, scale=scale, seq_len=settings.seq_len, micro_batch=1,
                         warmup=settings.warmup, repeats=settings.repeats, measure_links=False)
    table = assemble(model, req, WorkerResult(layers=layers, pairs=pairs, device_name=name), {})
    meta = dict(table.meta, link=LINK_LABEL if group is not None else "dense: no all-to-all",
                wall_s=round(time.perf_counter() - t0, 3), routing="sample tokens of the measured batch")
    return replace(table, meta=meta), built


def _stage_pairs(plan: Any, table: Any, built: Any, model: Any, settings: Settings) -> list[dict[str, Any]]:
    """Measured and predicted fused time of every stage of ``plan`` (see the module doc, 3)."""
    import torch

    from profiler.pairs import measure_stage_pairs
    from profiler.timing import Clock

    clock = Clock(torch.device(settings.device))
    member = {t: (built.modules[t], built.inputs[t], built.losses[t]) for t in built.modules}
    types = [layer.type_key for layer in model.layers]
    rows = []
    for s, (a, b) in enumerate(plan.bounds()):
        idx = [(a + j, b - 1 - j) for j in range(b - a)]
        timing = measure_stage_pairs([(member[types[x]], member[types[y]]) for x, y in idx], clock=clock,
                                     repeats=max(1, settings.repeats // 2))
        pred_ov = sum(table.ov(x, y) for x, y in idx)
        pred_serial = sum(table.layers[x].serial_f + table.layers[y].serial_i for x, y in idx)
        rows.append({"stage": s, "layers": [a, b], "measured_fused_s": timing.ov.median,
                     "measured_serial_s": timing.serial.median, "predicted_fused_s": pred_ov,
                     "predicted_serial_s": pred_serial,
                     "fused_error": (timing.ov.median - pred_ov) / pred_ov if pred_ov else None,
                     "measured_hidden_share": 1 - timing.ratio.median,
                     "predicted_hidden_share": 1 - pred_ov / pred_serial if pred_serial else None})
    return rows


def _plans(name: str, table: Any, settings: Settings, work: str) -> dict[str, Any]:
    """The two partitions planned from the measured table, simulated, and their stages timed."""
    from planner.api import plan as make
    from planner.core.costs_io import save_costs
    from planner.simulation import simulate_plan

    path = os.path.join(work, f"{name}.profile.json")
    save_costs(table, path)
    out = {}
    for partition in ("overlap", "serial"):
        p = make(name, profile=path, pp=settings.pp, microbatches=settings.microbatches, partition=partition,
                 schedule="1f1b-overlap", seq_len=settings.seq_len, time_limit=settings.time_limit,
                 global_batch=settings.microbatches * _replicas(name, settings))
        file = os.path.join(work, f"{name}.{partition}.plan.json")
        p.save(file)
        out[partition] = p, simulate_plan(file)
    return out


def _replicas(name: str, settings: Settings) -> int:
    """Sequences per step that give each data-parallel replica ``settings.microbatches``
    microbatches: dp x micro-batch size of the model's cluster at ``settings.pp``."""
    from planner.api import resolve_cluster
    from planner.core.hf_config import load_model

    cl = resolve_cluster(load_model(name), None, pp=settings.pp, seq_len=settings.seq_len)
    return cl.parallel.dp * cl.training.micro_batch_size


def _analytical(model: Any) -> dict[str, Any]:
    from planner.api import resolve_cluster
    from profiler.analytical import analytical_costs

    cluster = resolve_cluster(model, None)
    table = analytical_costs(model, cluster)
    types = {}
    for lc in table.layers:
        types.setdefault(lc.type, {k: getattr(lc, k) for k in ("f", "i", "w", "a2a_f", "a2a_b")})
    return {"gpu": cluster.gpu.name, "parallel": asdict(cluster.parallel), "seq_len": table.seq_len,
            "microbatch_size": table.microbatch_size, "layer_types": types,
            "label": "analytical model, full width, BF16 peak of the cluster's GPU, its TP/EP sharding"}


def _measured_types(table: Any) -> dict[str, Any]:
    types = {}
    for lc in table.layers:
        types.setdefault(lc.type, {k: getattr(lc, k) for k in ("f", "i", "w", "a2a_f", "a2a_b")})
    return types


def check_model(name: str, settings: Settings, work: str) -> dict[str, Any]:
    """Everything the module doc lists, for one model."""
    import torch

    from planner.core.hf_config import load_model

    model = load_model(name)
    scale = _pick_scale(model, settings)
    table, built = _profile(model, scale, settings)
    plans = _plans(name, table, settings, work)
    result = {"scale": scale, "seq_len": settings.seq_len, "dtype": "float32",
              "measured": {"layer_types": _measured_types(table), "pairs": table.meta["pairs"],
                           "cv": table.meta["cv"], "link": table.meta["link"], "wall_s": table.meta["wall_s"]},
              "analytical": _analytical(model), "plans": {}}
    for partition, (plan, sim) in plans.items():
        result["plans"][partition] = {
            "stages": [list(b) for b in plan.bounds()], "schedule": plan.solver.get("schedule", ""),
            "simulate": {k: sim[k] for k in ("step_time_s", "bubble_fraction", "busy_s")},
            "stage_pairs": _stage_pairs(plan, table, built, model, settings)}
    sims = {k: v["simulate"]["step_time_s"] for k, v in result["plans"].items()}
    result["overlap_vs_serial_simulated"] = sims["overlap"] / sims["serial"] - 1 if sims["serial"] else None
    if torch.cuda.is_available() and settings.device == "cuda":
        result["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    del built
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny width: the same code, for CI")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated model ids")
    args = ap.parse_args(argv)
    import torch

    settings = DRY if args.dry_run else GPU
    if settings.device == "cpu":
        torch.set_num_threads(1)  # [Note: CPU threads] in profiler.measured
    if settings.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; run with --dry-run on a CPU", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    out: dict[str, Any] = {"dry_run": args.dry_run, "settings": asdict(settings), "torch": torch.__version__,
                           "device": torch.cuda.get_device_name() if settings.device == "cuda" else "cpu",
                           "link": LINK_LABEL, "models": {}}
    with tempfile.TemporaryDirectory(prefix="ppplan-gpu-check-") as work:
        for name in args.models.split(","):
            t = time.perf_counter()
            out["models"][name] = {**check_model(name, settings, work), "wall_s": time.perf_counter() - t}
            if settings.device == "cuda":
                torch.cuda.empty_cache()
    out["wall_s"] = time.perf_counter() - t0
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(tmp, args.out)
    sims = {m: r["overlap_vs_serial_simulated"] for m, r in out["models"].items()}
    print(f"wrote {args.out} ({out['wall_s']:.0f} s); simulated overlap-aware vs serial: "
          + ", ".join(f"{m} {v:+.1%}" for m, v in sims.items() if v is not None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
