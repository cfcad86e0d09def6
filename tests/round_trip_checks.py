"""Each file ``ppplan export`` wrote, read back by its framework's own loader.

The checkers are the export tests' and ``benchmarks/frameworks.py``'s, which render the
plan themselves; so first the file on disk must be exactly what the library renders for
that plan (``same_as_library``), then the checker runs on that rendering, and what only a
file shows (a module to import, a CSV path to open) is read from the file:

- torch-csv: ``_torch_round_trip`` (tests/test_export_torch.py): torch's ``_Action.from_str``,
  ``_validate_schedule`` (its stage -> rank map must be the plan's), ``_add_send_recv`` and
  ``_PipelineScheduleRuntime._load_csv``.
- torchtitan: torchtitan 0.3.0's ``ConfigManager`` imports the written module
  (``--module M --config ppplan_config``) and main's config classes (tests/fixtures/
  torchtitan_main) take ``apply_plan``; every exported field must read back; torchtitan's own
  stage -> rank rule for the configured schedule gives the plan's ranks; torch loads the CSV.
- megatron, megatron-bridge: Megatron-Core's ``PipelineParallelLayerLayout`` parses the layout
  (each stage's layers must be the plan's stage) and validates it; ``check_megatron_core`` /
  ``check_megatron_bridge`` (benchmarks/frameworks.py) build ``TransformerConfig``.
- deepspeed: the written module's ``PlannedPipelineModule`` built by DeepSpeed's own
  ``PipelineModule.__init__`` for every rank, over torch's fake process group (one process; see
  ``_fake_ranks``): each rank must own the plan's layers; ``check_deepspeed``: DeepSpeed's
  ``TrainSchedule`` order per rank.
- trace: the JSON loads and carries the plan's step time (no framework reads it back).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmark_modules import load_benchmark
from planner.export import LaunchPlan, export_plan

__all__ = ["CHECKS", "same_as_library"]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed prints its accelerator probe otherwise
frameworks = load_benchmark("frameworks")

_LETTERS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
"""Megatron's ``LayerType`` names -> the plan's layout letters (planner.core.model.ROLE_LETTERS)."""


def same_as_library(plan: LaunchPlan, fmt: str, main: str, summary: dict) -> None:
    """Every file the command wrote (``summary['files']``) holds what ``export_plan`` renders."""
    rendered = export_plan(plan, fmt, out=main).files
    if list(rendered) != summary["files"]:
        raise AssertionError(f"export --format {fmt} wrote {summary['files']}, the library renders {list(rendered)}")
    for path, text in rendered.items():
        if Path(path).read_text() != text:
            raise AssertionError(f"{path} differs from export_plan(plan, {fmt!r})")


def _torch_csv(plan: LaunchPlan, folder: Path, main: str, summary: dict) -> list[str]:
    from test_export_torch import _torch_round_trip

    (folder / "torch-check").mkdir()
    mapping = _torch_round_trip(plan, folder / "torch-check")
    if [mapping[s] for s in range(plan.num_stages)] != plan.ranks():
        raise AssertionError(f"torch maps stages to ranks {mapping}, the plan {plan.ranks()}")
    return ["torch _load_csv + _validate_schedule"]


def _torchtitan(plan: LaunchPlan, folder: Path, main: str, summary: dict) -> list[str]:
    from test_export_torchtitan import _read_back

    module, csv_path = Path(main).stem, summary["files"][1]
    fields, done = summary["fields"], ["torch _load_csv (torchtitan CSV)"]
    _load_torch_csv(plan, csv_path)
    probe = folder / f"{module}_main.py"
    probe.write_text(f"from torchtitan_main.trainer_config import Config\nfrom {module} import apply_plan\n\n\n"
                     "def main_config():\n    return apply_plan(Config())\n")
    with _importable(folder, FIXTURES):
        if "def ppplan_config" in Path(main).read_text():
            config = frameworks._load_config(["--module", module, "--config", "ppplan_config"])
            _same("torchtitan 0.3 ConfigManager", _read_back(config, fields["0.3"]), fields["0.3"])
            done.append("torchtitan 0.3 ConfigManager")
        config = frameworks._load_config(["--module", probe.stem, "--config", "main_config"])
        _same("torchtitan main ConfigManager", _read_back(config, fields["main"]), fields["main"])
    _torchtitan_stages(plan, config.parallelism)
    return done + ["torchtitan main ConfigManager (fixture)", "torchtitan stage placement + module split"]


def _torchtitan_stages(plan: LaunchPlan, parallelism) -> None:
    """torchtitan's own stage -> rank rule for the configured schedule
    (``_get_pp_rank_to_stage_indices_mapping``) gives the plan's ranks, and each model part names
    the plan's layers of that stage (``tok_embeddings``, ``layers.<k>``, ``norm`` + ``lm_head``)."""
    from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping

    ranks = [None] * plan.num_stages
    for rank in range(plan.pp):
        for s in _get_pp_rank_to_stage_indices_mapping(rank, plan.pp, parallelism.pipeline_parallel_schedule,
                                                        plan.num_stages):
            ranks[s] = rank
    _same(f"torchtitan's placement for {parallelism.pipeline_parallel_schedule}", ranks, plan.ranks())
    layout, names, decoder = plan.model["layout"], [], 0
    for a, b in plan.bounds():
        part = []
        for letter in layout[a:b]:
            part += {"E": ["tok_embeddings"], "L": ["norm", "lm_head"]}.get(letter, [f"layers.{decoder}"])
            decoder += letter == "t"
        names.append(part)
    _same("torchtitan module_fqns_per_model_part", parallelism.module_fqns_per_model_part, names)


def _load_torch_csv(plan: LaunchPlan, path: str) -> None:
    import types

    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    stage = types.SimpleNamespace(num_stages=plan.num_stages, group_size=plan.pp, group_rank=0,
                                  stage_index_to_group_rank=None)
    _PipelineScheduleRuntime([stage], n_microbatches=plan.num_microbatches)._load_csv(path)


def _megatron(plan: LaunchPlan, folder: Path, main: str, summary: dict) -> list[str]:
    args = shlex.split(Path(main).read_text())
    value = lambda flag, default=None: args[args.index(flag) + 1] if flag in args else default  # noqa: E731
    _megatron_layout(plan, value("--pipeline-model-parallel-layout"), int(value("--pipeline-model-parallel-size")),
                     int(value("--num-layers")), int(value("--mtp-num-layers", 0)))
    done = ["Megatron-Core PipelineParallelLayerLayout"]
    if _known_model(plan):
        with _quiet():
            frameworks.check_megatron_core(plan, folder)
        done.append("Megatron-Core TransformerConfig")
    return done


def _megatron_bridge(plan: LaunchPlan, folder: Path, main: str, summary: dict) -> list[str]:
    import yaml

    model = yaml.safe_load(Path(main).read_text())["model"]
    _megatron_layout(plan, model["pipeline_model_parallel_layout"], model["pipeline_model_parallel_size"],
                     model["num_layers"], model["mtp_num_layers"] or 0)
    done = ["Megatron-Core PipelineParallelLayerLayout (Bridge YAML)"]
    if plan.model.get("name") in frameworks.BRIDGE_RECIPES:
        with _quiet():
            frameworks.check_megatron_bridge(plan, folder)
        done.append("Megatron-Bridge recipe + TransformerConfig")
    return done


def _megatron_layout(plan: LaunchPlan, layout: str, pp: int, num_layers: int, mtp: int) -> None:
    """Megatron's own parse of ``layout``: each stage (rank s % pp, chunk s // pp) holds the plan's layers."""
    with _quiet():
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

        parsed = PipelineParallelLayerLayout(layout, pp)
        parsed.validate_layer_layout(num_layers=num_layers, mtp_num_layers=mtp)
    theirs = ["".join(_LETTERS[t.name] for t in parsed.layout[s % pp][s // pp]) for s in range(plan.num_stages)]
    ours = [plan.model["layout"][a:b] for a, b in plan.bounds()]
    _same(f"Megatron's parse of layout {layout!r}", theirs, ours)


def _deepspeed(plan: LaunchPlan, folder: Path, main: str, summary: dict) -> list[str]:
    import torch.nn as nn
    from deepspeed.pipe import LayerSpec

    scope: dict = {}
    exec(compile(Path(main).read_text(), main, "exec"), scope)  # the written file, as a user runs it
    want_interval = 1 if plan.cluster.settings.recompute == "full" else 0
    _same("DEEPSPEED_CONFIG gradient_accumulation_steps", scope["DEEPSPEED_CONFIG"]["gradient_accumulation_steps"],
          plan.num_microbatches)
    layers = int(plan.model["num_layers"])
    for rank, _ in _fake_ranks(plan.pp):
        with _quiet():
            module = scope["PlannedPipelineModule"]([LayerSpec(nn.Identity) for _ in range(layers)],
                                                    num_stages=scope["NUM_STAGES"])
        got = (module.stage_id, module._local_start, module._local_stop, len(module.forward_funcs),
               module.activation_checkpoint_interval)
        a, b = plan.bounds()[rank]
        _same(f"DeepSpeed PipelineModule on rank {rank} (stage, start, stop, layers, interval)", got,
              (rank, a, b, b - a, want_interval))
    frameworks.check_deepspeed(plan, folder)
    return ["DeepSpeed PipelineModule (fake process group)", "DeepSpeed TrainSchedule order"]


def _fake_ranks(world: int) -> Iterator[tuple[int, None]]:
    """Be each rank of a ``world``-rank job in turn, in this process: torch's ``fake`` backend
    (``torch/testing/_internal/distributed/fake_pg.py``: collectives that do nothing) under
    DeepSpeed's communication layer, so ``PipelineModule.__init__`` builds its topology and groups
    as on a real rank. DeepSpeed's shared-memory op is left unbuilt ([Note: DeepSpeed CPU comm op]
    in tests/deepspeed_ranks.py)."""
    import deepspeed
    import deepspeed.ops
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    saved = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    try:
        for rank in range(world):
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
            dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
            try:
                with _quiet():
                    deepspeed.init_distributed(dist_backend="fake", auto_mpi_discovery=False)
                yield rank, None
            finally:
                dist.destroy_process_group()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _trace(plan: LaunchPlan, folder: Path, main: str, summary: dict) -> list[str]:
    doc = json.loads(Path(main).read_text())
    _same("trace otherData.step_time_s", doc["otherData"]["step_time_s"], plan.predicted.step_time_s)
    if not doc["traceEvents"]:
        raise AssertionError("the trace has no events")
    return []


def _same(what: str, got, want) -> None:
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, the plan has {want!r}")


def _known_model(plan: LaunchPlan) -> bool:
    from planner.core.paths import MODELS_DIR

    return (MODELS_DIR / f"{plan.model.get('name')}.json").exists()


@contextlib.contextmanager
def _importable(*folders: Path) -> Iterator[None]:
    """``folders`` on ``sys.path`` and modules imported from them forgotten afterwards, so the
    next configuration's module of the same name is read afresh."""
    import importlib

    before, roots = set(sys.modules), [str(f) for f in folders]
    sys.path[:0] = roots
    importlib.invalidate_caches()
    try:
        yield
    finally:
        del sys.path[:len(roots)]
        for name in set(sys.modules) - before:
            if any(str(getattr(sys.modules[name], "__file__", "") or "").startswith(r) for r in roots):
                del sys.modules[name]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The frameworks' own prints and logs kept off the round trip's output."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


CHECKS: dict[str, Callable[[LaunchPlan, Path, str, dict], list[str]]] = {
    "torch-csv": _torch_csv, "torchtitan": _torchtitan, "megatron": _megatron,
    "megatron-bridge": _megatron_bridge, "deepspeed": _deepspeed, "trace": _trace,
}
"""Format -> its check: ``(plan, folder, main file, export --json summary) -> checks that ran``;
raises ``AssertionError`` (or the framework's own error) when the export is refused."""
