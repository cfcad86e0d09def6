"""GPU check: every CUDA path one GPU allows, in one process, one JSON file.

For Qwen3-Next-80B-A3B and DeepSeek-V3 on one GPU, each section written as it ends:
1. the measured profile on cuda of every layer type at the largest width that fits
   (``_pick_scale``); NCCL refuses two ranks on one GPU, so the expert-parallel all-to-all
   is a side-stream copy of the same bytes (``SideStreamLink``, labelled in the JSON);
2. plans from it with the overlap-aware and the serially balanced partition;
3. the fused-pair timings of their stages (``_stage_pairs``); 4. ``ppplan simulate`` of both;
5. the analytical profile beside the measured one; 6. the MoE types in padded capacity mode;
7. with transformers installed, every type built from transformers' classes;
8. ``trace_import``: a traced run of ``examples/trace_hook.py``'s loop on the device
   (``TRACE_MODEL``), read back by ``ppplan profile --from-trace`` (the device clock and HTA's
   kernel classifier on a GPU), beside the measured profile of the same layer types.
docs/gpu.md gives what one H200 measured; ``--dry-run`` runs the same code on the CPU at a
tiny width (tests/test_gpu_check.py).

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
import traceback
from dataclasses import asdict, dataclass, replace
from typing import Any

MODELS = ("qwen3-next-80b-a3b", "deepseek-v3")
SCALES = (1.0, 0.5, 0.25, 0.125, 0.0625)
MEMORY_SHARE = 0.4
"""Share of the GPU's free memory the layer types' weights + gradients may take (the rest:
activations of a pair, the allocator's slack)."""
TRACE_MODEL = "qwen3-30b-a3b"
"""The trace-import section's model: an MoE whose three layer types a short loop covers."""
TRACE_SCALE = {"cuda": 0.0625, "cpu": 0.01}
"""Its width: small enough that the 50-layer loop's trace of a few steps stays tens of MB."""
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
    """``ppplan plan --work``."""


GPU = Settings(device="cuda", scale=None, seq_len=4096, warmup=1, repeats=3, pp=4, microbatches=8, time_limit=10.0)
"""The GPU run: 3 repeats and ``--budget-s`` because the profiler's MoE runs its local experts
in a Python loop, launch-bound on a GPU (docs/gpu.md gives what the full-width profile took)."""
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


def _profile(model: Any, scale: float, settings: Settings, *, capacity: Any = None, modules: str = "native"):
    """Measured cost table and the modules it timed (one process, side-stream link);
    ``capacity``: a ``CapacityMode`` for the routed experts (None: dropless); ``modules``:
    native or transformers (``profiler.hf``)."""
    import torch

    from profiler.layers.program import SideStreamLink
    from profiler.measure_worker import WorkerConfig, WorkerResult, measure_types
    from profiler.measured import ProfileRequest, assemble

    device = torch.device(settings.device)
    cfg = WorkerConfig(model=model, scale=scale, ep=1, device=settings.device, seq_len=settings.seq_len,
                       micro_batch=1, warmup=settings.warmup, repeats=settings.repeats, seed=0,
                       threads=torch.get_num_threads(), moe_capacity=capacity, modules=modules,
                       raw_config=_raw(model) if modules == "transformers" else None)
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


def _raw(model: Any) -> dict[str, Any]:
    from profiler.hf.config import raw_config

    return raw_config(model)


def _transformers_section(model: Any, scale: float, settings: Settings) -> dict[str, Any]:
    """Every layer type measured on transformers' own classes (``profiler.hf``), with the
    class of each module timed (the decoder layer inside ``HfDecoderLayer``)."""
    table, built = _profile(model, scale, settings, modules="transformers")
    classes = {t: type(getattr(m, "layer", m)).__name__ for t, m in built.modules.items()}
    del built
    return {"layer_types": _layer_types(table), "pairs": table.meta["pairs"], "wall_s": table.meta["wall_s"],
            "classes": classes}


def _stage_pairs(plan: Any, table: Any, built: Any, model: Any, settings: Settings) -> list[dict[str, Any]]:
    """Measured and predicted fused time of every stage of ``plan``: F of layer s+j beside I of
    layer e-1-j, overlapped and serial, summed over the stage (``profiler.pairs.measure_stage_pairs``),
    beside the table's sums of OV and of serial pairs."""
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
                 schedule="1f1b-overlap", seq_len=settings.seq_len, work=settings.time_limit,
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
    return {"gpu": cluster.gpu.name, "parallel": asdict(cluster.parallel), "seq_len": table.seq_len,
            "microbatch_size": table.microbatch_size, "layer_types": _layer_types(table),
            "label": "analytical model, full width, BF16 peak of the cluster's GPU, its TP/EP sharding"}


def _trace_section(settings: Settings, work: str) -> dict[str, Any]:
    """``TRACE_MODEL``'s layers trained for three steps in one process with the trace hook
    (examples/trace_hook.py: F and one-pass B ranges), the trace read back by
    ``planner.from_trace.profile_from_trace``, and the same layer types' measured profile:
    per type the trace's F and B against the profile's F and I + W."""
    import importlib.util

    hook = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "trace_hook.py")
    spec = importlib.util.spec_from_file_location("ppplan_trace_hook_example", hook)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    from planner.core.hf_config import load_model
    from planner.from_trace import profile_from_trace

    scale, seq = TRACE_SCALE[settings.device], min(settings.seq_len, 1024)
    folder = os.path.join(work, "traces")
    t0 = time.perf_counter()
    example.train(folder, model=TRACE_MODEL, scale=scale, seq_len=seq, steps=3, device=settings.device)
    traced = profile_from_trace(folder)
    prof, built = _profile(load_model(TRACE_MODEL), scale, replace(settings, seq_len=seq))
    del built
    got, ref = _layer_types(traced), _layer_types(prof)
    rows = {t: {"trace_f": got[t]["f"], "trace_b": got[t]["b"], "profile_f": ref[t]["f"],
                "profile_i_plus_w": ref[t]["i"] + ref[t]["w"]} for t in got}
    meta = traced.meta["trace"]
    return {"model": TRACE_MODEL, "scale": scale, "seq_len": seq, "steps": 3, "clock": meta["clock"],
            "samples": meta["samples"], "comm_comp_overlap": meta["comm_comp_overlap"],
            "provenance_f": {t: meta["provenance"]["layers"][t]["f"] for t in got}, "layer_types": rows,
            "wall_s": round(time.perf_counter() - t0, 3)}


def _layer_types(table: Any) -> dict[str, Any]:
    """F, I, W, full backward B and all-to-all seconds of the first layer of each type in ``table``."""
    types = {}
    for lc in table.layers:
        types.setdefault(lc.type, {k: getattr(lc, k) for k in ("f", "i", "w", "b", "a2a_f", "a2a_b")})
    return types


def _capacity_section(model: Any, scale: float, settings: Settings) -> dict[str, Any]:
    """The MoE layer types again in Megatron's padded capacity mode (capacity factor 1.0,
    ``--moe-pad-expert-input-to-capacity``): static all-to-all splits, no host sync, the local
    experts as one batched GEMM instead of a Python loop per expert (the dropless path's
    per-expert launches made the full-width MoE layers launch-bound on the H200)."""
    from profiler.layers.moe_capacity import capacity_mode

    mode = capacity_mode(1.0, pad=True)
    table, built = _profile(model, scale, settings, capacity=mode)
    del built
    types = {t: v for t, v in _layer_types(table).items() if "moe" in t}
    return {"mode": "capacity factor 1.0, padded (Megatron --moe-expert-capacity-factor 1.0 "
                    "--moe-pad-expert-input-to-capacity)", "layer_types": types, "wall_s": table.meta["wall_s"]}


GEMM_SHAPES = (
    (4096, 7168, 7168, "DeepSeek-V3 dense projection, 4096-token microbatch"),
    (4096, 18432, 7168, "DeepSeek-V3 dense MLP up"),
    (4096, 2048, 2048, "Qwen3-Next attention projection"),
    (512, 4096, 7168, "DeepSeek-V3 expert gate+up, 512 rows"),
    (128, 4096, 7168, "DeepSeek-V3 expert gate+up, 128 rows (4096 x 8 / 256: even routing)"),
    (128, 7168, 2048, "DeepSeek-V3 expert down, 128 rows"),
    (4096, 1536, 2048, "Qwen3-30B-A3B expert gate+up, 4096 rows"),
    (320, 1024, 2048, "Qwen3-Next expert gate+up, 320 rows"),
    (4096, 151936, 2048, "Qwen3 output head"),
)
"""(m, n, k, what): GEMM shapes of the shipped models, timed in BF16 by ``_gemms``."""
LAUNCH_BOUND_SHAPES = {(320, 1024, 2048)}
"""Shapes ``shape_curves`` leaves out: 23-27 us on the H200, the kernel launch's floor, not
the tiles' fill."""


def shape_curves(gemms: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per precision, the shape curve (scale, D) ``gemm.fit_shape_curve`` fits to the measured
    shares of peak (``LAUNCH_BOUND_SHAPES`` left out): where the cost model's measured GEMM
    constants come from (``profiler.cost_model.fitted.GEMM_DIM_HALF`` and its FP8 peers)."""
    from profiler.cost_model.gemm import fit_shape_curve

    out = {}
    for kind in ("bf16", "fp8"):
        points = [(g["m"], g["n"], g["k"], g[kind]["share_of_peak"]) for g in gemms
                  if isinstance(g.get(kind), dict) and (g["m"], g["n"], g["k"]) not in LAUNCH_BOUND_SHAPES]
        if points:
            scale, dim_half = fit_shape_curve(points)
            out[kind] = {"scale": scale, "dim_half": dim_half, "shapes": len(points)}
    return out


def _gemms(settings: Settings) -> list[dict[str, Any]]:
    """BF16 (and FP8 where torch offers ``_scaled_mm``) time of each ``GEMM_SHAPES`` entry,
    as a share of the H100/H200 dense peak (989 TFLOP/s BF16, 1979 FP8: NVIDIA H200 datasheet),
    beside the cost model's ``gemm_efficiency`` for the same shape (``profiler.cost_model``)."""
    import torch

    from profiler.cost_model.fitted import FITTED
    from profiler.cost_model.gemm import gemm_efficiency

    device = torch.device(settings.device)
    div = 64 if settings.device == "cpu" else 1  # the dry run: the same code on tiny shapes
    peak = {"bf16": 989e12, "fp8": 1979e12}
    rows = []
    for m, n, k, what in GEMM_SHAPES:
        m, n, k = max(16, m // div), max(16, n // div), max(16, k // div)
        row: dict[str, Any] = {"m": m, "n": n, "k": k, "what": what,
                               "model_efficiency": gemm_efficiency(m, n, k, FITTED),
                               "model_efficiency_fp8": gemm_efficiency(m, n, k, FITTED, fp8=True)}
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, k, device=device, dtype=torch.bfloat16)
        runs = {"bf16": lambda: a @ b.t()}
        if settings.device == "cuda" and hasattr(torch, "_scaled_mm"):
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            one = torch.ones((), device=device)
            runs["fp8"] = lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        for kind, fn in runs.items():
            try:
                seconds = _time(fn, device, repeats=10 if settings.device == "cuda" else 2)
            except Exception as exc:  # FP8 needs (16-aligned) shapes and a new enough cuBLAS
                row[kind] = f"failed: {type(exc).__name__}: {exc}"[:200]
                continue
            tflops = 2.0 * m * n * k / seconds / 1e12
            row[kind] = {"seconds": seconds, "tflops": tflops, "share_of_peak": tflops * 1e12 / peak[kind]}
        rows.append(row)
    return rows


def _time(fn: Any, device: Any, *, repeats: int) -> float:
    """Median seconds of ``fn`` after 3 warm-ups (CUDA events on a GPU)."""
    from profiler.timing import Clock

    clock = Clock(device)
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        a = clock.mark()
        fn()
        times.append(clock.seconds(a, clock.mark()))
    return statistics.median(times)


def check_model(name: str, settings: Settings, work: str, result: dict[str, Any], *,
                deadline: float, save: Any) -> None:
    """Everything the module doc lists, for one model, written into ``result`` section by
    section (``save`` after each, so a run cut by the device's time limit keeps what it
    measured). Stage-pair timings are skipped, saying so, once ``deadline`` has passed."""
    import torch

    from planner.core.hf_config import load_model

    model = load_model(name)
    result["analytical"] = _analytical(model)
    scale = _pick_scale(model, settings)
    result.update(scale=scale, seq_len=settings.seq_len, dtype="float32", plans={})
    _log(f"{name}: measured profile at scale {scale}")
    table, built = _profile(model, scale, settings)
    result["measured"] = {"layer_types": _layer_types(table), "pairs": table.meta["pairs"],
                          "cv": table.meta["cv"], "link": table.meta["link"], "wall_s": table.meta["wall_s"]}
    save()
    from profiler.hf import available

    if available():
        _log(f"{name}: measured profile on transformers' layers")
        result["measured_transformers"] = _transformers_section(model, scale, settings)
        save()
    _log(f"{name}: profile took {table.meta['wall_s']:.1f} s; planning both partitions")
    plans = _plans(name, table, settings, work)
    for partition, (plan, sim) in plans.items():
        result["plans"][partition] = {
            "stages": [list(b) for b in plan.bounds()], "schedule": plan.solver.get("schedule", ""),
            "simulate": {k: sim[k] for k in ("step_time_s", "bubble_fraction", "busy_s")}}
    sims = {k: v["simulate"]["step_time_s"] for k, v in result["plans"].items()}
    result["overlap_vs_serial_simulated"] = sims["overlap"] / sims["serial"] - 1 if sims["serial"] else None
    save()
    if model.moe is not None and time.perf_counter() < deadline:
        _log(f"{name}: MoE layer types in padded capacity mode")
        result["measured_capacity_padded"] = _capacity_section(model, scale, settings)
        save()
    for partition, (plan, _) in plans.items():
        if time.perf_counter() > deadline:
            result["plans"][partition]["stage_pairs"] = "skipped: the run's time budget (--budget-s) was spent"
            continue
        _log(f"{name}: timing the fused pairs of the {partition} partition's stages")
        result["plans"][partition]["stage_pairs"] = _stage_pairs(plan, table, built, model, settings)
        save()
    if torch.cuda.is_available() and settings.device == "cuda":
        result["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    del built


def _log(text: str) -> None:
    print(f"gpu_check: {text}", file=sys.stderr, flush=True)


def _write(out: dict[str, Any], path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny width: the same code, for CI")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated model ids")
    ap.add_argument("--scale", type=float, help="width scale (default: the largest that fits; 0.01 with --dry-run)")
    ap.add_argument("--seq-len", type=int, help="tokens per sequence (default 4096; 16 with --dry-run)")
    ap.add_argument("--time-limit", type=float, help="ppplan plan --work per plan (default 10; 0.5 with --dry-run)")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="after this many seconds, skip the remaining stage-pair timings (the JSON says so)")
    args = ap.parse_args(argv)
    try:  # the planner's own needs, checked before minutes of profiling, not after
        import jsonschema  # noqa: F401
        import ortools  # noqa: F401
    except ImportError as exc:
        print(f"gpu_check: {exc}; install ppplan's requirements (pip install -e .) first", file=sys.stderr)
        return 2
    import torch

    settings = DRY if args.dry_run else GPU
    overrides = {"scale": args.scale, "seq_len": args.seq_len, "time_limit": args.time_limit}
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    if settings.device == "cpu":
        torch.set_num_threads(1)  # [Note: CPU threads] in profiler.measured
    if settings.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; run with --dry-run on a CPU", file=sys.stderr)
        return 2
    if settings.device == "cuda":
        # FP32 weights, TF32 matmuls: what an FP32 module gets from cuBLAS on Hopper when
        # allowed (the layers have no BF16 path); every figure carries this label.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    t0 = time.perf_counter()
    out: dict[str, Any] = {"dry_run": args.dry_run, "settings": asdict(settings), "torch": torch.__version__,
                           "device": torch.cuda.get_device_name() if settings.device == "cuda" else "cpu",
                           "matmul": "tf32" if settings.device == "cuda" else "fp32",
                           "link": LINK_LABEL, "models": {}}
    try:
        out["gemms"] = _gemms(settings)
        out["gemm_shape_curves"] = shape_curves(out["gemms"])
    except Exception as exc:
        out["gemms"] = f"failed: {type(exc).__name__}: {exc}"
    _write(out, args.out)
    with tempfile.TemporaryDirectory(prefix="ppplan-gpu-check-") as work:
        try:
            out["trace_import"] = _trace_section(settings, work)
        except Exception as exc:  # the other sections still run; the JSON names the failure
            out["trace_import"] = f"failed: {type(exc).__name__}: {exc}"
            _log(f"trace_import: FAILED\n{traceback.format_exc()[-4000:]}")
        _write(out, args.out)
        for name in args.models.split(","):
            t = time.perf_counter()
            result: dict[str, Any] = {}
            out["models"][name] = result
            try:
                check_model(name, settings, work, result, deadline=t0 + args.budget_s,
                            save=lambda: _write(out, args.out))
            except Exception as exc:  # keep the other model's figures; the JSON names the failure
                result["error"] = f"{type(exc).__name__}: {exc}"
                result["traceback"] = traceback.format_exc()[-4000:]
                _log(f"{name}: FAILED\n{result['traceback']}")
            result["wall_s"] = time.perf_counter() - t
            out["wall_s"] = time.perf_counter() - t0
            _write(out, args.out)
            if settings.device == "cuda":
                torch.cuda.empty_cache()
    sims = {m: r.get("overlap_vs_serial_simulated") for m, r in out["models"].items()}
    print(f"wrote {args.out} ({out['wall_s']:.0f} s); simulated overlap-aware vs serial: "
          + ", ".join(f"{m} {v:+.1%}" for m, v in sims.items() if v is not None))
    return 1 if any("error" in r for r in out["models"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
