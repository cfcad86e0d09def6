"""Each framework's own code on ppplan's exports: accepted / total per framework and version.

The plans are benchmarks/targets.py's: each shipped model at vpp 1 and 2,
``planner.api.plan(model, target=T, vpp=v, work=W)`` for the framework's ``--target`` T (a
request the planner refuses is listed with its reason, outside the total). Each export then
meets the framework's own code (``CHECKS``): Megatron-Core's layout and ``TransformerConfig``,
Megatron-Bridge's recipe and dataclasses, torchtitan's ``ConfigManager`` (0.3.0, and main's
config classes pinned in tests/fixtures/torchtitan_main), DeepSpeed's ``TrainSchedule``,
torch's schedule runtime, and with ``--megatron-lm DIR@LABEL`` Megatron-LM's ``validate_args``
(its source is in no wheel). docs/frameworks.md gives the table.

    python benchmarks/frameworks.py --json [--work 3] [--models llama3-8b,...] > results.json
    python benchmarks/frameworks.py --markdown [--megatron-lm DIR@core_v0.16.1]   # docs/frameworks.md
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import datetime
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import itertools
import json
import os
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed prints its detection to stdout, into the JSON

from planner.api import plan as api_plan  # noqa: E402
from planner.core.errors import InfeasibleError, InputError  # noqa: E402
from planner.core.hf_config import load_model, resolve_model_path  # noqa: E402
from planner.core.plan import Plan  # noqa: E402
from planner.export import export_plan, write_export  # noqa: E402
from planner.export.megatron import megatron_args  # noqa: E402
from planner.export.schedule import merged_order  # noqa: E402

MODELS = ("llama3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3")
BRIDGE_RECIPES = {"llama3-8b": ("recipes/llama/llama3.py", "llama3_8b_pretrain_config"),
                  "qwen3-30b-a3b": ("recipes/qwen/qwen3_moe.py", "qwen3_30b_a3b_pretrain_config"),
                  "qwen3-235b-a22b": ("recipes/qwen/qwen3_moe.py", "qwen3_235b_a22b_pretrain_config"),
                  "qwen3-next-80b-a3b": ("recipes/qwen/qwen3_next.py", "qwen3_next_80b_a3b_pretrain_config"),
                  "deepseek-v3": ("recipes/deepseek/deepseek_v3.py", "deepseek_v3_pretrain_config")}
PLAN_DECIDES = ("recompute_", "pipeline_model_parallel_", "virtual_pipeline_", "tensor_model_parallel_size",
                "expert_", "sequence_parallel", "moe_token_dispatcher_type", "moe_grouped_gemm", "seq_length", "mtp_",
                "num_layers", "bf16", "fp16", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
"""Model fields a pipeline plan decides (name prefixes)."""


def import_path(name: str, path: Path) -> types.ModuleType:
    """``path`` imported as module ``name`` (a folder without ``__init__.py``: as a namespace
    package) and kept in ``sys.modules``, where an import by name finds it, torchtitan's
    ``--module name`` included (``importlib.import_module``, torchtitan/config/manager.py):
    what a user's PYTHONPATH gives, without a folder in front of every later import."""
    if name in sys.modules:
        return sys.modules[name]
    if path.is_dir():
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(path)]
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class _MegatronTree(importlib.abc.MetaPathFinder):
    """``megatron.<package>`` from a Megatron-LM source tree where the installed ``megatron``
    namespace (megatron-core, megatron-bridge) has no such package: ``training``, ``legacy``,
    ``rl`` and ``post_training`` are in no wheel. Nothing else of the tree becomes importable."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder / "megatron")

    def find_spec(self, name: str, path, target=None):
        if not name.startswith("megatron.") or name.count(".") != 1:
            return None
        if importlib.machinery.PathFinder.find_spec(name, path) is not None:
            return None  # installed
        return importlib.machinery.PathFinder.find_spec(name, [self.folder])


@contextlib.contextmanager
def megatron_lm_tree(folder: Path) -> Iterator[None]:
    """Megatron-LM's packages importable from ``folder`` (it holds ``megatron/training`` ...)."""
    finder = _MegatronTree(folder)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def _transformer_config(model: str, values: dict):
    """Megatron-Core's ``TransformerConfig`` with the model's shape and ``values`` (its checks run)."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    names = {f.name for f in dataclasses.fields(TransformerConfig)}
    spec = load_model(model)
    kw = dict(hidden_size=spec.hidden, num_attention_heads=16, pipeline_dtype=torch.bfloat16)
    if spec.moe is not None:
        kw.update(num_moe_experts=spec.moe.num_experts, moe_router_topk=spec.moe.top_k)
    kw.update({k: v for k, v in values.items() if k in names})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformerConfig(**kw)


def check_megatron_core(plan: Plan, tmp: Path) -> None:
    """``PipelineParallelLayerLayout(layout, pp).validate_layer_layout`` and
    ``TransformerConfig(**exported values)`` (its ``__post_init__`` checks)."""
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    s = megatron_args(plan).settings
    layout = PipelineParallelLayerLayout(s["pipeline_model_parallel_layout"], s["pipeline_model_parallel_size"])
    layout.validate_layer_layout(num_layers=s["num_layers"], mtp_num_layers=s["mtp_num_layers"] or 0)
    values = {k: v for k, v in s.items() if v is not None}  # None: the flag is absent, Megatron's default
    if values["virtual_pipeline_model_parallel_size"] == 1:
        del values["virtual_pipeline_model_parallel_size"]
    _transformer_config(plan.model["name"], values)


def check_megatron_lm(plan: Plan, tmp: Path) -> None:
    """Megatron-LM's ``parse_args``, ``validate_args`` and ``core_transformer_config_from_args``
    (``megatron/training/arguments.py``) on the exported arguments plus the model's shape."""
    import io

    import torch

    import megatron.training.arguments as arguments

    m = megatron_args(plan)
    spec = load_model(plan.model["name"])
    par = plan.parallel
    world = plan.pp * int(par.get("tp", 1)) * int(par.get("cp", 1)) * int(par.get("dp", 1))
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0", **m.env)
    # the plan's GPU (Hopper, sm90) answers validate_args' device queries on this CPU machine: the
    # grouped-GEMM capability check and get_device_arch_version (megatron/training/utils.py)
    queries = torch.cuda.get_device_capability, torch.cuda.get_device_properties
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(major=9, minor=0)
    shape = ["--position-embedding-type", "rope", "--no-rope-fusion", "--hidden-size", str(spec.hidden),
             "--num-attention-heads", "16", "--ffn-hidden-size", str(spec.intermediate or 4 * spec.hidden)]
    if spec.moe is not None:
        shape += ["--num-experts", str(spec.moe.num_experts), "--moe-router-topk", str(spec.moe.top_k)]
    argv, sys.argv = sys.argv, ["pretrain_gpt.py", *m.args, *shape]
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args = arguments.parse_args()
            arguments.validate_args(args, {})
            arguments.core_transformer_config_from_args(args)
    finally:
        sys.argv = argv
        torch.cuda.get_device_capability, torch.cuda.get_device_properties = queries


def _bridge_tree(relpath: str) -> ast.Module:
    spec = importlib.util.find_spec("megatron.bridge")
    return ast.parse((Path(list(spec.submodule_search_locations)[0]) / relpath).read_text())


def _bridge_fields(relpath: str, cls: str) -> set[str]:
    node = next(n for n in ast.walk(_bridge_tree(relpath)) if isinstance(n, ast.ClassDef) and n.name == cls)
    return ({s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            | {s.name for s in node.body if isinstance(s, ast.FunctionDef)})


def _recipe_values(model: str) -> dict:
    path, function = BRIDGE_RECIPES[model]
    fn = next(n for n in ast.walk(_bridge_tree(path)) if isinstance(n, ast.FunctionDef) and n.name == function)
    out = {}
    for node in ast.walk(fn):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) \
                and target.value.attr == "model" and target.attr.startswith(PLAN_DECIDES):
            try:
                out[target.attr] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def check_megatron_bridge(plan: Plan, tmp: Path) -> None:
    """The ``--format megatron-bridge`` YAML merged over the model's Bridge recipe (its
    ``cfg.model.* = literal`` assignments of the fields a plan decides, read from the installed
    source), then ``TransformerConfig``; each section's field names against Bridge's
    dataclasses in its source (``ConfigContainer`` itself needs transformer-engine)."""
    import yaml

    text = export_plan(plan, "megatron-bridge").files["megatron_bridge_overrides.yaml"]
    exported = yaml.safe_load(text)
    model = plan.model["name"]
    _transformer_config(model, {**_recipe_values(model), **exported["model"]})
    fields = {"train": ("training/config.py", "TrainingConfig"), "dataset": ("training/config.py", "GPTDatasetConfig"),
              "comm_overlap": ("training/comm_overlap.py", "CommOverlapConfig")}
    for section, (path, cls) in fields.items():
        unknown = set(exported.get(section, {})) - {"_target_"} - _bridge_fields(path, cls)
        if unknown:
            raise ValueError(f"{section}: {sorted(unknown)} are not fields of Bridge's {cls}")
    if exported["dataset"]["seq_length"] != exported["model"]["seq_length"]:
        raise ValueError("dataset.seq_length differs from model.seq_length (ConfigContainer.validate asserts it)")


def _titan_module(plan: Plan, tmp: Path, name: str) -> None:
    write_export(export_plan(plan, "torchtitan", out=tmp / f"{name}.py"))


def _load_config(args: list[str]):
    """torchtitan's ``ConfigManager().parse_args(args)``; its refusal (tyro prints it, then exits)
    as a ValueError carrying the message."""
    import io

    from torchtitan.config import ConfigManager

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return ConfigManager().parse_args(args)
    except SystemExit:
        lines = [line.strip(" │") for line in err.getvalue().splitlines() if "Error" in line]
        raise ValueError(lines[0] if lines else err.getvalue()[-300:]) from None


_MODULES = itertools.count()
"""Module names of the torchtitan checks: ``id(plan)`` repeats once a plan is freed, and a module
already imported under a name is returned as it is, so a later check could read an earlier config."""


def check_torchtitan_0_3(plan: Plan, tmp: Path) -> None:
    """``ConfigManager().parse_args(["--module", M, "--config", "ppplan_config"])`` on the export."""
    name = f"tt_{next(_MODULES)}"
    _titan_module(plan, tmp, name)
    if "def ppplan_config" not in (tmp / f"{name}.py").read_text():
        raise ValueError(f"torchtitan ships no {plan.model['name']} model (torchtitan/models/): "
                         "the export has apply_plan for the user's own config, no ppplan_config")
    import_path(name, tmp / f"{name}.py")
    config = _load_config(["--module", name, "--config", "ppplan_config"])
    if config.parallelism.pipeline_parallel_degree != plan.pp:
        raise ValueError("pipeline_parallel_degree did not read back")


def check_torchtitan_main(plan: Plan, tmp: Path) -> None:
    """The same ``ConfigManager`` on ``apply_plan(Config())`` with torchtitan main's config
    classes (tests/fixtures/torchtitan_main names the commit)."""
    name = f"ttm_{next(_MODULES)}"
    _titan_module(plan, tmp, name)
    (tmp / f"{name}_probe.py").write_text(f"from torchtitan_main.trainer_config import Config\n"
                                          f"from {name} import apply_plan\n\n\ndef main_config():\n"
                                          f"    return apply_plan(Config())\n")
    import_path("torchtitan_main", FIXTURES / "torchtitan_main")
    import_path(name, tmp / f"{name}.py")
    import_path(f"{name}_probe", tmp / f"{name}_probe.py")
    config = _load_config(["--module", f"{name}_probe", "--config", "main_config"])
    if config.parallelism.num_pp_microbatches != plan.num_microbatches:
        raise ValueError("num_pp_microbatches did not read back")


def check_deepspeed(plan: Plan, tmp: Path) -> None:
    """Each rank's F/B order equals DeepSpeed's own ``TrainSchedule`` steps
    (``deepspeed/runtime/pipe/schedule.py``); tests/test_export_deepspeed.py runs a real
    2-process ``train_batch``."""
    from deepspeed.runtime.pipe.schedule import BackwardPass, ForwardPass, TrainSchedule

    export_plan(plan, "deepspeed")
    for rank in range(plan.pp):
        theirs, f, b = [], 0, 0
        for step in TrainSchedule(micro_batches=plan.num_microbatches, stages=plan.pp, stage_id=rank).steps():
            for cmd in step:
                if isinstance(cmd, ForwardPass):
                    theirs.append(f"{rank}F{f}")
                    f += 1
                elif isinstance(cmd, BackwardPass):
                    theirs.append(f"{rank}B{b}")
                    b += 1
        ours = merged_order(plan.parsed_schedule()[rank])
        if ours != theirs:
            raise ValueError(f"rank {rank} order differs from TrainSchedule")


def check_torch(plan: Plan, tmp: Path) -> None:
    """``_PipelineScheduleRuntime._load_csv``, ``_validate_schedule`` and ``_add_send_recv``
    on the exported CSV."""
    import csv
    import io

    from torch.distributed.pipelining.schedules import (_Action, _add_send_recv, _PipelineScheduleRuntime,
                                                        _validate_schedule)

    text = export_plan(plan, "torch-csv").files["schedule.csv"]
    actions = {r: [_Action.from_str(c) for c in row] for r, row in enumerate(csv.reader(io.StringIO(text)))}
    mapping = _validate_schedule(actions, plan.pp, plan.num_stages, plan.num_microbatches)
    _add_send_recv(copy.deepcopy(actions), lambda s: mapping[s], plan.num_stages)
    path = tmp / f"torch_{id(plan)}.csv"
    path.write_text(text)
    stage = types.SimpleNamespace(num_stages=plan.num_stages, group_size=plan.pp, group_rank=0,
                                  stage_index_to_group_rank=None)
    _PipelineScheduleRuntime([stage], n_microbatches=plan.num_microbatches)._load_csv(str(path))


CHECKS: list[tuple[str, str, str, str, Callable[[Plan, Path], None]]] = [
    ("Megatron-Core", "megatron-core", "megatron", "layout + TransformerConfig", check_megatron_core),
    ("Megatron-Bridge", "megatron-bridge", "megatron", "YAML over recipe + TransformerConfig + field names",
     check_megatron_bridge),
    ("torchtitan", "torchtitan", "torchtitan", "ConfigManager --module/--config", check_torchtitan_0_3),
    ("torchtitan main (fixture)", "", "torchtitan", "ConfigManager on main's config classes", check_torchtitan_main),
    ("DeepSpeed", "deepspeed", "deepspeed", "TrainSchedule order per rank", check_deepspeed),
    ("torch", "torch", "torch", "_load_csv + _validate_schedule + _add_send_recv", check_torch),
]
"""(framework, package for its version, --target planned for, check, function)."""


def _no_mtp_source(model: str, tmp: Path) -> str:
    """The model's config with its MTP layer off, in a folder named after the model: torchtitan
    runs MTP only without pipeline parallelism (``torchtitan/models/deepseek_v3/mtp.py``)."""
    cfg = json.loads(resolve_model_path(model).read_text())
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if cfg.get(key):
            cfg[key] = 0
    folder = tmp / "no-mtp" / model
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def _plans(target: str, models: list[str], work: float, tmp: Path) -> tuple[list, list]:
    """(model, vpp, plan, note) for every plan made, and (model, vpp, reason) for requests refused."""
    made, refused = [], []
    for model in models:
        mtp = "m" in load_model(model).layout
        source = _no_mtp_source(model, tmp) if target == "torchtitan" and mtp else model
        for vpp in (1, 2):
            try:
                plan = api_plan(source, target=target, vpp=vpp, work=work)
            except (InputError, InfeasibleError) as exc:
                refused.append((model, vpp, str(exc)))
                continue
            made.append((model, vpp, plan, "planned without its MTP layer" if source != model else ""))
    return made, refused


def run(models: list[str], work: float, megatron_lm: str | None = None) -> dict:
    """Every check on every plan; JSON-ready. ``megatron_lm``: "DIR@LABEL", a folder holding
    Megatron-LM's ``megatron/training`` (and ``legacy``, ``rl``, ``post_training``) of the release
    LABEL, whose ``validate_args`` then runs too (Megatron-LM is in no wheel)."""
    checks = list(CHECKS)
    out = []
    with contextlib.ExitStack() as stack:
        if megatron_lm:
            folder, _, label = megatron_lm.partition("@")
            stack.enter_context(megatron_lm_tree(Path(folder)))
            checks.insert(0, ("Megatron-LM", f"={label}", "megatron", "parse_args + validate_args + "
                              "core_transformer_config_from_args", check_megatron_lm))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        plans = {t: _plans(t, models, work, tmp) for t in {c[2] for c in checks}}
        for framework, package, target, check, fn in checks:
            made, refused = plans[target]
            rows, t0 = [], time.perf_counter()
            for model, vpp, plan, note in made:
                try:
                    fn(plan, tmp)
                    rows.append({"model": model, "vpp": vpp, "accepted": True, "note": note})
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - a framework's refusal, recorded
                    reason = (str(exc) or type(exc).__name__).splitlines()[0][:300]
                    rows.append({"model": model, "vpp": vpp, "accepted": False, "reason": reason, "note": note})
            out.append({"framework": framework, "target": target, "check": check,
                        "version": _version(package),
                        "accepted": sum(r["accepted"] for r in rows), "total": len(rows), "rows": rows,
                        "not_planned": [{"model": m, "vpp": v, "reason": r} for m, v, r in refused],
                        "wall_s": time.perf_counter() - t0})
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"checks": out, "work": work, "date": now,
            "loadavg": Path("/proc/loadavg").read_text().strip(), "command": " ".join(["python"] + sys.argv)}


def _version(package: str) -> str:
    """An installed package's version, "=LABEL" as given, or the pinned torchtitan main commit."""
    if package.startswith("="):
        return package[1:]
    return importlib.metadata.version(package) if package else "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"


def markdown(result: dict) -> str:
    """The table (one row per framework and version), then the requests the planner refused."""
    lines = ["| framework | version | check (the framework's own code) | plans | accepted / total | not accepted |",
             "|---|---|---|---|---|---|"]
    refused: dict[str, list[str]] = {}
    for c in result["checks"]:
        bad = "; ".join(f"{r['model']} vpp {r['vpp']}: {r['reason']}" for r in c["rows"] if not r["accepted"])
        lines.append(f"| {c['framework']} | {c['version'][:12]} | {c['check']} | --target {c['target']} | "
                     f"{c['accepted']} / {c['total']} | {bad or '-'} |")
        refused[c["target"]] = [f"{r['model']} vpp {r['vpp']}: {r['reason']}" for r in c["not_planned"]]
    lines.append("")
    lines += [f"- not planned for --target {t}: " + ("; ".join(items) or "none") for t, items in refused.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--work", type=float, default=3.0, help="planning effort per plan (ppplan plan --work)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--megatron-lm", metavar="DIR@LABEL",
                    help="also run Megatron-LM's validate_args from DIR (its megatron/ packages at release LABEL)")
    args = ap.parse_args(argv)

    with contextlib.redirect_stdout(sys.stderr):  # the frameworks' own logs; stdout is the result
        result = run(args.models.split(","), args.work, args.megatron_lm)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    if args.markdown or not args.json:
        sys.stdout.write(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
