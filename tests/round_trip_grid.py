"""The round-trip grid as data: the ``ppplan plan`` command lines ``tests/round_trip.py`` checks.

Drawn from a fixed seed (``SEED``) and stratified: every axis deals its values from a
shuffled, repeated deck, so each value comes up about equally often (a Latin-hypercube
draw) instead of at the mercy of chance. Four configurations in five are drawn coherent
with their ``--target`` (a model, schedule, shape and recomputation mode that target's
capability table lists, ``planner.core.targets.TARGETS``, and a shape the schedule family
runs, ``solvers.schedule.families.registry.applies``), so most of them plan and reach the exports;
every fifth is drawn free on every axis, so refusals are exercised too. A pp that does not
divide the model's shipped GPU count gets the shipped cluster with ``num_gpus`` set to
pp x tp x dp and a per-replica batch rounded up to a multiple of pp (written as
``cluster.yaml``); explicit microbatch counts are drawn from the
divisors of the per-replica batch, and one kind is a count that divides nothing. Two later
axes (``LATE_AXES``, their own seeded deck, so the first axes' draws are unchanged) add
cluster-file fields no flag sets (``FIELD_EDITS``: ``cp_comm_type``, ``cuda_graph_scope``,
``fp8_recipe: torchao_rowwise``, ``param_dtype``, ``grad_reduce_in_fp32: false``, written into
``cluster.yaml``) and ``--offload`` / ``--recompute-modules`` (``OPTIONS``). Listed by hand: a few
``--gpus`` degree searches, ``--profile`` journeys, ``--layout`` (``LAYOUTS``), ``--devices``
fleets (``DEVICES``), ``--sites`` (``SITES``), offloading and module lists (``OFFLOADS``) and
those cluster fields with the settings they need (``FIELDS``: context parallelism, FP8, FSDP),
each with a refusal or two.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from planner.core.hf_config import load_model
from planner.core.paths import CLUSTERS_DIR, MODELS_DIR
from planner.core.targets import TARGET_NAMES, TARGETS
from solvers.schedule.families.registry import SCHEDULES, applies
from solvers.schedule.search.search import SCHEDULE_CHOICES

__all__ = ["SEED", "DRAWN", "AXES", "LATE_AXES", "FIELD_EDITS", "OPTIONS", "Config", "GRID", "draw", "cluster_file"]

SEED = 20261201
"""Seed of the draw: the grid is the same on every machine and every run."""

DRAWN = 300
"""Configurations drawn from the axes (the hand-listed ones come on top)."""

FREE_EVERY = 5
"""Every fifth drawn configuration ignores what its target runs."""

MODELS = tuple(sorted(p.stem for p in MODELS_DIR.glob("*.json")))
INPUTS = ("examples/", "tests/fixtures/")
"""Arguments naming the repository's own files (written relative to its root)."""

SHAPES = ((1, None), (2, "loop"), (2, "v"))
"""(vpp, --placement): placement is passed only where it applies, with virtual stages."""

AXES: dict[str, tuple] = {
    "model": MODELS,
    "pp": tuple(range(2, 17)),
    "shape": SHAPES,
    "schedule": SCHEDULE_CHOICES,
    "target": TARGET_NAMES,
    "recompute": (None, "auto", "none", "selective", "full"),
    "microbatches": ("default", "auto", "divisor", "divisor", "non-divisor"),
    "memory_limit": (None, None, None, "60GiB", "7.2e10", "80GB", "4microbatches", "8microbatches", "3mb"),
}
"""Each axis and its values (a value listed twice is dealt twice as often). ``None``: the
option is not passed. ``3mb`` is the old spelling of ``3microbatches``."""

FIELD_EDITS: dict[str, tuple[tuple[str, object], ...]] = {
    "cp_comm_type": (("training.cp_comm_type", "p2p"),),
    "cuda_graph_scope": (("training.cuda_graph_scope", ["moe_router", "moe_preprocess"]),),
    "fp8_rowwise": (("training.precision", "fp8"), ("training.fp8_recipe", "torchao_rowwise")),
    "param_dtype": (("training.param_dtype", "bf16"),),
    "grad_reduce_bf16": (("training.grad_reduce_in_fp32", False),),
}
"""Cluster-file fields no flag sets, written into ``cluster.yaml`` (the ``fields`` axis)."""

OPTIONS: dict[str, tuple[str, ...]] = {
    "offload_modules": ("--offload", "expert_fc1,moe_act"),
    "recompute_modules": ("--recompute-modules", "moe_act,layernorm"),
}
"""Options of later rounds (the ``options`` axis): Megatron's activation offloading and
selective recomputation modules (offloading layers needs pp 1: hand-listed, ``OFFLOADS``)."""

LATE_AXES: dict[str, tuple] = {
    "fields": (None,) * 5 + tuple(FIELD_EDITS),
    "options": (None,) * 6 + tuple(OPTIONS),
}
"""Axes added after the first grid, dealt from their own seeded generator (``SEED + 1``) so
the draws of ``AXES`` stay what they were; ``None``: the shipped cluster, no option."""


@dataclass(frozen=True, kw_only=True)
class Config:
    """One configuration: the ``ppplan plan`` arguments and the files they need."""

    name: str
    """Short id, ``g017`` (drawn), ``d2`` (degree search), ``p5`` (profile)."""
    plan: tuple[str, ...]
    """Arguments after ``ppplan plan``, without ``--work``, ``--quiet`` and ``--out``."""
    cluster: tuple[tuple[str, object], ...] = ()
    """Changes to the model's shipped cluster written as ``cluster.yaml`` (key path -> value)."""
    setup: tuple[tuple[str, ...], ...] = ()
    """``ppplan`` commands run first in the same folder (``profile ... --analytical``)."""
    axes: tuple[tuple[str, object], ...] = field(default=(), compare=False)
    """The axis values drawn (what the coverage test counts)."""

    def commands(self, work: float, *, root: Path) -> list[str]:
        """The exact shell command lines, run in an empty folder (``root``: the repository)."""
        lines = [shlex.join(["ppplan", *self.resolve(step, root)]) for step in self.setup]
        lines.append(shlex.join(["ppplan", "plan", *self.resolve(self.plan, root), "--work", f"{work:g}",
                                 "--quiet", "--out", "plan.json"]))
        if self.cluster:
            model = self.plan[0]
            edits = ", ".join(f"{k}: {v}" for k, v in self.cluster)
            lines.insert(0, f"# cluster.yaml = planner/data/clusters/{model}.yaml with {edits}")
        return lines

    @staticmethod
    def resolve(args: Sequence[str], root: Path) -> list[str]:
        """``args`` with the repository's input files (``INPUTS``) as absolute paths."""
        return [str(root / a) if a.startswith(INPUTS) else a for a in args]


def cluster_file(config: Config) -> str | None:
    """Text of ``cluster.yaml`` for ``config`` (None when it plans on the shipped cluster)."""
    if not config.cluster:
        return None
    data = yaml.safe_load((CLUSTERS_DIR / f"{config.plan[0]}.yaml").read_text())
    for path, value in config.cluster:
        *parents, leaf = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[leaf] = value
    return yaml.safe_dump(data, sort_keys=False)


class _Deck:
    """One axis's values dealt from shuffled, repeated copies: each about equally often."""

    def __init__(self, values: Sequence, rng: random.Random) -> None:
        self.values, self.rng, self.pool = tuple(values), rng, []

    def deal(self, allowed: Iterable | None = None):
        ok = None if allowed is None else list(allowed)
        for _ in range(2):
            for k, v in enumerate(self.pool):
                if ok is None or v in ok:
                    return self.pool.pop(k)
            fresh = list(self.values)
            self.rng.shuffle(fresh)
            self.pool += fresh
        raise ValueError(f"no value of {self.values} is among {ok}")


def _models(target: str) -> list[str]:
    """Models ``target`` builds (torchtitan's have no MTP module)."""
    return [m for m in MODELS if TARGETS[target].mtp != "none" or "m" not in load_model(m).layout]


def _schedules(target: str, model: str) -> list[str]:
    """Schedule choices ``target`` runs for ``model``: its families (with pp >= 2, a fused family
    only where it fuses: virtual stages and expert parallelism as Megatron needs), CP-SAT only
    where any order runs."""
    t = TARGETS[target]
    names = [n for n in SCHEDULES if t.families is None or n in t.families]
    if not t.fused_pairs or (t.fused_needs_ep and load_model(model).moe is None):
        names = [n for n in names if not SCHEDULES[n].fused]
    if t.fused_needs_vpp:
        names = [n for n in names if not SCHEDULES[n].fused or SCHEDULES[n].vpp != (1,)]
    return ["auto", *names] + (["cpsat"] if t.any_order else [])


def _recomputes(target: str, schedule: str) -> list[str | None]:
    """Recomputation modes ``target`` has a switch for (with fused pairs: those it fuses with)."""
    t = TARGETS[target]
    modes = t.fused_recompute if schedule in SCHEDULES and SCHEDULES[schedule].fused else t.recompute
    return [None, "auto", *modes]


def _shapes(target: str, schedule: str) -> list[tuple[int, str | None]]:
    """Shapes ``schedule`` runs that ``target`` builds."""
    t = TARGETS[target]
    kind = SCHEDULES.get(schedule)
    return [(v, p) for v, p in SHAPES if (t.max_vpp is None or v <= t.max_vpp)
            and (p or "loop") in t.placements and (kind is None or applies(kind, v, p or "loop"))]


def _shipped(model: str) -> dict:
    return yaml.safe_load((CLUSTERS_DIR / f"{model}.yaml").read_text())


def _layout(model: str, pp: int) -> tuple[list[str], tuple, int]:
    """(cluster arguments, cluster edits, per-replica batch) for ``pp`` ranks."""
    c = _shipped(model)
    par, gpus, batch = c["parallel"], c["num_gpus"], c["training"]["global_batch"]
    if gpus % (pp * par["tp"]) == 0:
        return ["--pp", str(pp)], (), batch // (gpus // (pp * par["tp"]))
    per_replica = -(-batch // par["dp"] // pp) * pp  # a multiple of pp, as interleaved 1F1B needs
    edits = (("num_gpus", pp * par["tp"] * par["dp"]), ("parallel.pp", pp),
             ("training.global_batch", per_replica * par["dp"]))
    return ["--cluster", "cluster.yaml"], edits, per_replica


def _microbatches(kind: str, batch: int, pp: int, rng: random.Random) -> list[str]:
    if kind == "default":
        return []
    if kind == "auto":
        return ["--microbatches", "auto"]
    divisors = [d for d in range(2, min(batch, 128) + 1) if batch % d == 0]
    if kind == "divisor" and divisors:  # at least 2 x pp where the batch has one: what DualPipeV needs
        return ["--microbatches", str(rng.choice([d for d in divisors if d >= 2 * pp] or divisors))]
    return ["--microbatches", str(next(d for d in range(pp + 1, 4 * batch) if batch % d))]


def _fields(target: str, model: str) -> list[str | None]:
    """Field edits ``target`` runs on ``model`` (CUDA-graph MoE scopes only with MoE layers)."""
    moe = load_model(model).moe is not None
    return [None, *(f for f in FIELD_EDITS if f != "cuda_graph_scope" or moe)]


def _options(target: str, recompute: str | None) -> list[str | None]:
    """Late options ``target`` runs: offloading where it offloads, module lists where it has
    them and neither full nor no recomputation is asked for."""
    t = TARGETS[target]
    return [None, *(["offload_modules"] if t.offload else []),
            *(["recompute_modules"] if t.module_sets and recompute in (None, "selective") else [])]


def draw(seed: int = SEED, n: int = DRAWN) -> list[Config]:
    """``n`` configurations dealt from ``AXES`` and ``LATE_AXES`` (see the module docstring)."""
    rng, late = random.Random(seed), random.Random(seed + 1)
    decks = {axis: _Deck(values, rng) for axis, values in AXES.items()}
    decks |= {axis: _Deck(values, late) for axis, values in LATE_AXES.items()}
    out = []
    for k in range(n):
        free = k % FREE_EVERY == FREE_EVERY - 1
        got = {"target": decks["target"].deal()}
        got["model"] = decks["model"].deal(None if free else _models(got["target"]))
        got["schedule"] = decks["schedule"].deal(None if free else _schedules(got["target"], got["model"]))
        got["recompute"] = decks["recompute"].deal(None if free else _recomputes(got["target"], got["schedule"]))
        got["shape"] = decks["shape"].deal(None if free else _shapes(got["target"], got["schedule"]))
        got["pp"], got["microbatches"] = decks["pp"].deal(), decks["microbatches"].deal()
        got["memory_limit"] = decks["memory_limit"].deal()
        got["fields"] = decks["fields"].deal(None if free else _fields(got["target"], got["model"]))
        got["options"] = decks["options"].deal(None if free else _options(got["target"], got["recompute"]))
        out.append(_config(f"g{k:03d}", got, rng))
    return out


def _config(name: str, got: dict, rng: random.Random) -> Config:
    (vpp, placement), model, pp = got["shape"], got["model"], got["pp"]
    where, edits, batch = _layout(model, pp)
    if got["fields"] is not None:
        where = ["--cluster", "cluster.yaml", *where] if where[0] == "--pp" else where
        edits += FIELD_EDITS[got["fields"]]
    args = [model, *where, "--schedule", got["schedule"], "--target", got["target"]]
    args += ["--vpp", str(vpp), "--placement", placement] if placement else []
    args += ["--recompute", got["recompute"]] if got["recompute"] else []
    args += _microbatches(got["microbatches"], batch, pp, rng)
    args += ["--memory-limit", got["memory_limit"]] if got["memory_limit"] else []
    args += OPTIONS[got["options"]] if got["options"] else []
    return Config(name=name, plan=tuple(args), cluster=edits, axes=tuple(sorted(got.items())))


DEGREE_SEARCHES = [
    Config(name="d0", plan=("llama3-8b", "--gpus", "8")),
    Config(name="d1", plan=("qwen3-30b-a3b", "--gpus", "32", "--target", "megatron")),
    Config(name="d2", plan=("llama3-8b", "--gpus", "24", "--target", "deepspeed", "--memory-limit", "70GiB")),
    Config(name="d3", plan=("qwen3-235b-a22b", "--gpus", "64", "--target", "torchtitan")),
    Config(name="d4", plan=("qwen3-next-80b-a3b", "--gpus", "32", "--microbatches", "auto")),
    Config(name="d5", plan=("deepseek-v3", "--gpus", "256", "--memory-limit", "4microbatches")),
]
"""``--gpus N``: degree searches (tp, pp, vpp, ep, dp and micro-batch size chosen)."""

_FOUR = "examples/costs/four_stages.json"
_MEASURED = "tests/fixtures/round_trip/measured_style.json"
_ANALYTICAL = ("costs.json",)

PROFILES = [
    Config(name="p0", plan=("--profile", _FOUR, "--pp", "4", "--microbatches", "12", "--memory-limit", "4mb")),
    Config(name="p1", plan=("--profile", _FOUR, "--pp", "2", "--vpp", "2", "--placement", "v", "--schedule", "zbv",
                            "--microbatches", "8")),
    Config(name="p2", plan=("--profile", _FOUR, "--pp", "2", "--schedule", "1f1b", "--microbatches", "5",
                            "--memory-limit", "70GiB")),
    Config(name="p3", plan=("--profile", _FOUR, "--pp", "4", "--microbatches", "8", "--target", "megatron")),
    Config(name="p4", plan=("--profile", _MEASURED, "--pp", "4", "--microbatches", "16")),
    Config(name="p5", plan=("--profile", _MEASURED, "--pp", "5", "--vpp", "2", "--placement", "loop",
                            "--schedule", "interleaved", "--microbatches", "10")),
    Config(name="p6", plan=("--profile", _MEASURED, "--pp", "3", "--schedule", "cpsat", "--microbatches", "6",
                            "--memory-limit", "6microbatches")),
    Config(name="p7", plan=("--profile", _MEASURED, "--pp", "2", "--vpp", "2", "--placement", "v",
                            "--schedule", "dualpipev", "--microbatches", "8")),
    Config(name="p8", plan=("--profile", _MEASURED, "--pp", "6", "--schedule", "1f1b", "--microbatches", "12")),
    Config(name="p9", plan=("qwen3-30b-a3b", "--profile", *_ANALYTICAL, "--target", "megatron", "--vpp", "2",
                            "--placement", "loop", "--schedule", "interleaved-overlap"),
           setup=(("profile", "qwen3-30b-a3b", "--analytical", "--quiet", "--out", *_ANALYTICAL),)),
    Config(name="p10", plan=("llama3-8b", "--profile", *_ANALYTICAL, "--pp", "2", "--target", "deepspeed",
                             "--schedule", "1f1b"),
           setup=(("profile", "llama3-8b", "--analytical", "--quiet", "--out", *_ANALYTICAL),)),
    Config(name="p11", plan=("llama3-8b", "--profile", *_ANALYTICAL, "--recompute", "full"),
           setup=(("profile", "llama3-8b", "--analytical", "--quiet", "--out", *_ANALYTICAL),)),
    Config(name="p12", plan=("qwen3-235b-a22b", "--profile", *_ANALYTICAL, "--target", "torchtitan",
                             "--memory-limit", "80GB"),
           setup=(("profile", "qwen3-235b-a22b", "--analytical", "--quiet", "--out", *_ANALYTICAL),)),
]
"""``--profile``: hand-written tables (the shipped example, a measured-style one) planned
without a model, and ``ppplan profile --analytical`` tables planned with their model."""

_CLUSTER = ("--cluster", "cluster.yaml")

LAYOUTS = [
    Config(name="l0", plan=("llama3-8b", "--layout", "8,8,8,8")),
    Config(name="l1", plan=("llama3-8b", "--layout", "6,10,10,6", "--keep-layout", "--target", "megatron",
                            "--schedule", "1f1b")),
    Config(name="l2", plan=("llama3-8b", "--layout", "Et*3|t*5|t*5|t*4|t*4|t*4|t*4|t*3L", "--pp", "4",
                            "--keep-layout", "--target", "megatron")),
    Config(name="l3", plan=("llama3-8b", "--layout", "8,8,8,8", "--pp", "2", "--placement", "v", "--keep-layout",
                            "--schedule", "zbv", "--target", "torchtitan")),
    Config(name="l4", plan=("llama3-8b", "--layout", "10,8,8,6", "--keep-layout", "--target", "deepspeed")),
    Config(name="l7", plan=("llama3-8b", "--layout", "4,4,4,4,4,4,4,4", "--target", "deepspeed")),
    Config(name="l8", plan=("qwen3-30b-a3b", "--layout", "Et*11|t*12|t*12|t*13L", "--keep-layout", "--target",
                            "megatron", "--offload", "moe_act", "--recompute-modules", "moe_act")),
    Config(name="l9", plan=("llama3-8b", "--layout", "8,8,8,8", "--gpus", "16")),
    Config(name="l5", plan=("qwen3-30b-a3b", "--layout", "Et*11|t*12|t*12|t*13L", "--keep-layout",
                            "--target", "megatron", "--microbatches", "auto")),
    Config(name="l6", plan=("llama3-8b", "--layout", "8,8,8,7")),
]
"""``--layout``: decoder layers per stage and Megatron layout strings, beside the free plan
and kept (``--keep-layout``), with virtual stages loop and V, offloading and module lists;
``l6`` miscounts the layers, ``l7`` gives DeepSpeed two stages per rank, ``l9`` adds ``--gpus``."""

DEVICES = [
    Config(name="h0", plan=("llama3-8b", "--devices", "h100:8,a100:8")),
    Config(name="h1", plan=("llama3-8b", "--devices", "a100:8,h100:8", "--devices-order", "search",
                            "--target", "megatron")),
    Config(name="h2", plan=("qwen3-30b-a3b", "--devices", "a100:16,a100:16:40", "--target", "megatron")),
    Config(name="h3", plan=("llama3-8b", "--devices", "h100:8,a100:8", "--pp", "4", "--target", "deepspeed")),
    Config(name="h4", plan=("llama3-8b", "--devices", "h100:8,a100:8", "--target", "torchtitan", "--vpp", "2",
                            "--schedule", "interleaved")),
    Config(name="h5", plan=("llama3-8b", "--devices", "h100:6,a100:10")),
    Config(name="h6", plan=("llama3-8b", "--devices", "h100:8,a100:8", "--layout", "10,10,6,6", "--keep-layout",
                            "--devices-order", "search")),
    Config(name="h7", plan=("qwen3-30b-a3b", "--devices", "h100:16,a100:16", "--target", "megatron",
                            "--offload", "moe_act", "--recompute-modules", "moe_act,layernorm")),
    Config(name="h8", plan=("llama3-8b", "--devices", "h100:8,a100:8", "--recompute", "auto", "--microbatches",
                            "auto", "--memory-limit", "4microbatches")),
    Config(name="h9", plan=("llama3-8b", "--devices", "h100:8,a100:8", "--gpus", "16")),
]
"""``--devices``: mixed fleets in the given and searched order, with a layout, offloading and
the microbatch search; ``h5`` splits no whole rank, ``h9`` adds ``--gpus``."""

SITES = [
    Config(name="s0", plan=("llama3-8b", "--sites", "2", "--inter-site-gbps", "100", "--inter-site-latency-ms", "5")),
    Config(name="s1", plan=("qwen3-30b-a3b", "--sites", "2", "--inter-site-gbps", "10", "--inter-site-latency-ms",
                            "10", "--target", "megatron")),
    Config(name="s2", plan=("llama3-8b", "--sites", "2", "--inter-site-gbps", "400", "--gpus", "16")),
    Config(name="s3", plan=("llama3-8b", "--sites", "2", "--inter-site-gbps", "25", "--pp", "2",
                            "--target", "deepspeed")),
    Config(name="s4", plan=("llama3-8b", "--sites", "2")),
    Config(name="s5", plan=("llama3-8b", "--sites", "2", "--inter-site-gbps", "100", "--inter-site-latency-ms", "5",
                            "--pp", "4", "--vpp", "2", "--schedule", "interleaved", "--target", "megatron")),
    Config(name="s6", plan=("qwen3-30b-a3b", "--sites", "2", "--inter-site-gbps", "50", "--target", "megatron",
                            "--offload", "expert_fc1,moe_act")),
    Config(name="s7", plan=("llama3-8b", "--sites", "2", "--inter-site-gbps", "100", "--layout", "8,8,8,8",
                            "--keep-layout")),
    Config(name="s8", plan=("llama3-8b", "--sites", "2", "--inter-site-gbps", "100", "--devices", "h100:8,a100:8")),
]
"""``--sites``: two sites joined by a slow link (pp or dp crossing), with virtual stages,
offloading and a layout; ``s4`` gives no bandwidth, ``s8`` a mixed fleet."""

OFFLOADS = [
    Config(name="o0", plan=("qwen3-30b-a3b", "--target", "megatron", "--offload", "expert_fc1,moe_act")),
    Config(name="o1", plan=("llama3-8b", "--target", "megatron", "--pp", "1", "--tp", "8", "--offload", "2",
                            "--recompute", "none")),
    Config(name="o9", plan=("llama3-8b", "--target", "megatron", "--pp", "1", "--tp", "8", "--offload", "2")),
    Config(name="o10", plan=("qwen3-30b-a3b", *_CLUSTER, "--target", "megatron", "--offload", "none"),
           cluster=(("training.offload", "moe_act"),)),
    Config(name="o11", plan=("llama3-8b", "--profile", *_ANALYTICAL, "--target", "megatron", "--recompute-modules",
                             "mlp"),
           setup=(("profile", "llama3-8b", "--analytical", "--quiet", "--out", *_ANALYTICAL),)),
    Config(name="o2", plan=("qwen3-30b-a3b", "--target", "megatron", "--offload", "none", "--offload", "moe_act")),
    Config(name="o3", plan=("qwen3-30b-a3b", "--gpus", "32", "--target", "megatron", "--offload", "moe_act")),
    Config(name="o4", plan=("llama3-8b", "--offload", "attn_norm")),
    Config(name="o5", plan=("qwen3-30b-a3b", "--target", "megatron", "--recompute-modules", "moe_act,layernorm")),
    Config(name="o6", plan=("qwen3-30b-a3b", "--target", "megatron", "--recompute-modules", "core_attn",
                            "--recompute-modules", "moe_act,layernorm", "--offload", "expert_fc1")),
    Config(name="o7", plan=("qwen3-30b-a3b", "--gpus", "32", "--target", "megatron", "--recompute-modules",
                            "moe_act")),
    Config(name="o8", plan=("llama3-8b", "--recompute-modules", "mlp")),
]
"""``--offload`` (layers, modules, repeated) and ``--recompute-modules`` (Megatron's, with
``--gpus`` too); ``o3``: offloading with ``--gpus``, ``o4``, ``o8``: torch runs neither, ``o9``:
layer offloading with recomputation ``auto``, ``o11``: module lists over a profile measured
without (all refused); ``o10``: ``--offload none`` over the cluster file's."""

FIELDS = [
    Config(name="f0", plan=("llama3-8b", *_CLUSTER, "--target", "megatron"),
           cluster=(("training.cp_comm_type", "p2p"), ("parallel.cp", 2), ("parallel.dp", 2))),
    Config(name="f1", plan=("llama3-8b", *_CLUSTER, "--target", "torchtitan"),
           cluster=(("training.cp_comm_type", "torch_alltoall"), ("parallel.cp", 2), ("parallel.dp", 2))),
    Config(name="f2", plan=("qwen3-30b-a3b", *_CLUSTER, "--target", "megatron"),
           cluster=(("training.cuda_graph_scope", ["moe_router", "moe_preprocess"]),)),
    Config(name="f3", plan=("llama3-8b", *_CLUSTER, "--target", "torchtitan"),
           cluster=(("training.precision", "fp8"), ("training.fp8_recipe", "torchao_rowwise"))),
    Config(name="f4", plan=("qwen3-30b-a3b", *_CLUSTER, "--target", "torchtitan"),
           cluster=(("training.param_dtype", "bf16"), ("training.fsdp", True))),
    Config(name="f5", plan=("qwen3-30b-a3b", *_CLUSTER, "--target", "megatron"),
           cluster=(("training.grad_reduce_in_fp32", False),)),
    Config(name="f6", plan=("llama3-8b", *_CLUSTER, "--gpus", "16"),
           cluster=(("training.param_dtype", "bf16"), ("training.grad_reduce_in_fp32", False))),
    Config(name="f7", plan=("llama3-8b", *_CLUSTER), cluster=(("training.cp_comm_type", "a2a"),)),
    Config(name="f8", plan=("llama3-8b", *_CLUSTER), cluster=(("training.cuda_graph_scope", "mlp"),)),
    Config(name="f9", plan=("qwen3-30b-a3b", *_CLUSTER, "--gpus", "32", "--target", "megatron"),
           cluster=(("training.offload", ["none", ["moe_act"]]),)),
    Config(name="f10", plan=("llama3-8b", *_CLUSTER, "--gpus", "16", "--target", "megatron"),
           cluster=(("training.cp_comm_type", "p2p"), ("training.grad_reduce_in_fp32", False))),
]
"""Cluster-file fields no flag sets: ``cp_comm_type``, ``cuda_graph_scope``, ``fp8_recipe``,
``param_dtype``, ``grad_reduce_in_fp32``, and the file's offloading with ``--gpus``; ``f7`` names
a mode not modelled, ``f9`` a choice of offloading modes with ``--gpus``."""

GRID: list[Config] = draw() + DEGREE_SEARCHES + PROFILES + LAYOUTS + DEVICES + SITES + OFFLOADS + FIELDS
"""Every configuration the round trip runs."""
