"""The plan: what ppplan decides and predicts, as JSON (planner/data/schemas/plan.schema.json).

Top-level keys are fixed (other tools read them): ``schema_version``, ``model``,
``cluster``, ``parallel``, ``microbatches``, ``stages``, ``schedule``, ``predicted``,
``baselines``, ``solver``. ``stage_costs`` embeds the per-stage costs the prediction
was made with, so ``ppplan simulate`` and ``ppplan validate`` need nothing else;
``costs`` records where they came from (analytical or measured, device, scale).

``model``, ``parallel``, ``microbatches`` and ``stages`` are typed (``planner.core.plan_parts``),
``predicted``, ``solver``, ``cluster`` and ``baselines`` too (``planner.core.plan_records``):
JSON only at the edges, ``Plan.to_dict``/``Plan.from_dict`` (checked by the schema).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.core.costs import P2PCost
from planner.core.errors import InputError
from planner.core.jsonio import json_text, read_json, write_text_atomic
from planner.core.limits import MAX_STAGE_MICROBATCHES, check_batch_value, check_cost_value, check_stage_microbatches
from planner.core.p2p import SiteHop
from planner.core.placement import check_bounds
from planner.core.plan_parts import Microbatches, ModelInfo, Parallel, Stage, partition_stages, stages_from_list
from planner.core.plan_records import Baseline, ClusterInfo, Predicted, SolverRecord, baselines_from_dict
from planner.core.schedule import Action, Schedule, parse_schedule
from planner.core.schemas import check_schema
from planner.core.stage_costs import StageCosts

__all__ = ["Plan", "ModelInfo", "Parallel", "Microbatches", "Stage", "Predicted", "SolverRecord", "ClusterInfo", "Baseline", "partition_stages", "SCHEMA_VERSION", "load_plan_file", "stage_costs_to_dict", "stage_costs_from_dict", "without_wall_s"]

SCHEMA_VERSION = 1


@dataclass(kw_only=True)
class Plan:
    """A pipeline plan: partition, microbatches, per-rank schedule and predictions.

    ``model``, ``parallel``, ``microbatches``, ``stages`` (``planner.core.plan_parts``),
    ``predicted``, ``solver``, ``cluster``, ``baselines`` (``planner.core.plan_records``) are typed; given as JSON
    dicts, they are converted on construction."""

    model: ModelInfo
    """name, num_layers, layout (one Megatron letter per layer: E, t, m, L), layer_types."""
    cluster: ClusterInfo
    """gpu (name, peak_flops, memory_bytes, ...), num_gpus, gpus_per_node, training settings."""
    parallel: Parallel
    """pp, vpp, tp, ep, dp and the stage placement style (loop or v)."""
    microbatches: Microbatches
    """count and size (sequences per microbatch)."""
    stages: tuple[Stage, ...]
    """The partition: stage, rank and layer range per stage, in stage order."""
    schedule: dict[str, list[str]]
    """Rank (as string) -> action strings in execution order."""
    stage_costs: dict[str, Any]
    """Per-stage costs the prediction used (see ``stage_costs_to_dict``)."""
    predicted: Predicted = field(default_factory=dict)  # type: ignore[assignment]
    """step_time_s, bubble_fraction, mfu, peak_memory_bytes (per rank), memory_limit_bytes, ..."""
    baselines: dict[str, Baseline] = field(default_factory=dict)
    """Name -> at least step_time_s, for the same model and cluster."""
    solver: SolverRecord = field(default_factory=dict)  # type: ignore[assignment]
    """name, status, wall_s, gap, and what was tried."""
    costs: dict[str, Any] = field(default_factory=dict)
    """Provenance of the costs: source, device, scale, and for a plan made from a profile
    file its ``profile`` path and ``profile_sha256`` (read again by ``ppplan replay``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Optional sections written by later passes (e.g. ``replan``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelInfo):
            self.model = ModelInfo.from_dict(self.model)
        if not isinstance(self.parallel, Parallel):
            self.parallel = Parallel.from_dict(self.parallel)
        if not isinstance(self.microbatches, Microbatches):
            self.microbatches = Microbatches.from_dict(self.microbatches)
        if not isinstance(self.cluster, ClusterInfo):
            self.cluster = ClusterInfo.from_dict(self.cluster)
        if not all(isinstance(b, Baseline) for b in self.baselines.values()):
            self.baselines = baselines_from_dict(self.baselines)
        if not isinstance(self.predicted, Predicted):
            self.predicted = Predicted.from_dict(self.predicted)
        if not isinstance(self.solver, SolverRecord):
            self.solver = SolverRecord.from_dict(self.solver)
        if not (isinstance(self.stages, tuple) and all(isinstance(s, Stage) for s in self.stages)):
            self.stages = stages_from_list(self.stages)

    # --- derived views -------------------------------------------------------------
    @property
    def pp(self) -> int:
        """Pipeline ranks."""
        return int(self.parallel.pp)

    @property
    def num_stages(self) -> int:
        """Stages (pp x vpp)."""
        return len(self.stages)

    @property
    def num_microbatches(self) -> int:
        """Microbatches per step."""
        return int(self.microbatches.count)

    @property
    def memory_limit_bytes(self) -> int | None:
        """Per-GPU memory limit the plan was made for."""
        v = self.predicted.memory_limit_bytes
        return int(v) if v is not None else None

    @property
    def memory_limits(self) -> int | list[int | None] | None:
        """The limit ``validate`` checks: one byte count per rank where the stages name their
        device group's (mixed fleets), else ``memory_limit_bytes``."""
        per_rank = {int(s.rank): int(s.memory_limit_bytes) for s in self.stages if s.memory_limit_bytes is not None}
        if not per_rank:
            return self.memory_limit_bytes
        return [per_rank.get(r, self.memory_limit_bytes) for r in range(self.pp)]

    def require_one_device(self, doing: str) -> None:
        """``InputError`` when the stages name device groups (a ``--devices`` plan): ``doing``
        (re-planning, replaying) models one GPU type."""
        names = sorted({s.device for s in self.stages if s.device})
        if names:
            raise InputError("plan.stages", f"the plan spans device groups ({', '.join(names)}), which {doing} "
                             "does not model", "plan the fleet again with ppplan plan --devices, or plan "
                             "one GPU type without --devices")

    def bounds(self) -> list[tuple[int, int]]:
        """Layer range ``(start, end)`` of each stage."""
        return [(int(s.layers[0]), int(s.layers[1])) for s in self.stages]

    def ranks(self) -> list[int]:
        """Rank of each stage."""
        return [int(s.rank) for s in self.stages]

    def parsed_schedule(self) -> Schedule:
        """The schedule as ``Action`` lists (fresh lists each call). The parse is kept while
        ``schedule`` holds the same text (a hash of each row), so a large plan that is loaded
        and then validated is parsed once."""
        key = tuple((r, hash(tuple(row))) for r, row in self.schedule.items())
        memo = self.__dict__.get("_parsed")
        if memo is None or memo[0] != key:
            memo = (key, parse_schedule(self.schedule))
            self.__dict__["_parsed"] = memo
        return {r: list(row) for r, row in memo[1].items()}

    def parsed_stage_costs(self) -> StageCosts:
        """The embedded stage costs."""
        return stage_costs_from_dict(self.stage_costs, self.ranks())

    def stage_layers(self, rank: int) -> list[tuple[int, int]]:
        """Layer ranges of the stages on ``rank``, in stage order."""
        return [b for b, r in zip(self.bounds(), self.ranks()) if r == rank]

    def actions(self, rank: int) -> list[Action]:
        """Actions of ``rank`` in execution order."""
        return self.parsed_schedule().get(rank, [])

    # --- JSON ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the fixed top-level keys first."""
        out = {
            "schema_version": SCHEMA_VERSION,
            "model": self.model.to_dict(),
            "cluster": self.cluster.to_dict(),
            "parallel": self.parallel.to_dict(),
            "microbatches": self.microbatches.to_dict(),
            "stages": [s.to_dict() for s in self.stages],
            "schedule": self.schedule,
            "predicted": self.predicted.to_dict(),
            "baselines": {name: b.to_dict() for name, b in self.baselines.items()},
            "solver": self.solver.to_dict(),
            "costs": self.costs,
            "stage_costs": self.stage_costs,
        }
        out.update(self.extra)
        return out

    def to_json(self) -> str:
        """Indented JSON text; refuses what the loader refuses (``planner.core.jsonio.json_text``)."""
        return json_text(self.to_dict(), what="plan")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``to_json`` atomically (never half-written)."""
        write_text_atomic(path, self.to_json())

    @staticmethod
    def from_dict(data: Any, *, what: str = "plan") -> "Plan":
        """Check against the schema and for internal consistency, then build.

        The schema checks the structure with the action lists left empty; the actions
        themselves (hundreds of thousands in a large plan, one ``descend`` each in the
        schema validator) are checked in one pass here and parsed by ``parse_schedule``."""
        sched = data.get("schedule") if isinstance(data, dict) else None
        if isinstance(sched, dict):
            check_schema({**data, "schedule": {k: [] for k in sched}}, "plan", what=what)
            _check_action_lists(sched, what)
        else:
            check_schema(data, "plan", what=what)
        known = {"schema_version", "model", "cluster", "parallel", "microbatches", "stages",
                 "schedule", "predicted", "baselines", "solver", "costs", "stage_costs"}
        plan = Plan(**{k: data[k] for k in known - {"schema_version"} if k in data},
                    extra={k: v for k, v in data.items() if k not in known})
        _check_consistency(plan, what)
        return plan


def _check_action_lists(sched: dict, what: str) -> None:
    """What the schema says of ``schedule``'s values: lists of strings (one pass per rank)."""
    for rank, actions in sched.items():
        if not isinstance(actions, list):
            raise InputError(f"{what}.schedule.{rank}", f"{actions!r:.40} is not of type 'array'",
                             "see planner/data/schemas/plan.schema.json")
        if not all(type(a) is str for a in actions):
            pos = next(k for k, a in enumerate(actions) if type(a) is not str)
            raise InputError(f"{what}.schedule.{rank}[{pos}]", f"{actions[pos]!r:.40} is not of type 'string'",
                             "see planner/data/schemas/plan.schema.json")


def _check_sizes(plan: Plan, what: str) -> None:
    """Sizes that later passes allocate for, held to ``planner.core.limits`` before any of them runs."""
    check_stage_microbatches(plan.microbatches.count, len(plan.stages), field=f"{what}.microbatches.count")
    check_batch_value(f"{what}.microbatches.size", "microbatch_size", plan.microbatches.size)
    actions = sum(len(v) for v in plan.schedule.values())
    if actions > 3 * MAX_STAGE_MICROBATCHES:
        raise InputError(f"{what}.schedule", f"holds {actions} actions, above the planner's limit of "
                         f"{3 * MAX_STAGE_MICROBATCHES}", "give the plan ppplan wrote")


def _check_consistency(plan: Plan, what: str) -> None:
    _check_sizes(plan, what)
    for k, st in enumerate(plan.stages):
        if st.stage != k:
            raise InputError(f"{what}.stages[{k}].stage", f"is {st.stage}, expected {k}",
                             "list stages in order 0, 1, ...")
        if not 0 <= st.rank < plan.pp:
            raise InputError(f"{what}.stages[{k}].rank", f"{st.rank} is not in 0..{plan.pp - 1}")
    if plan.num_stages != plan.pp * int(plan.parallel.vpp):
        raise InputError(f"{what}.stages", f"{plan.num_stages} stages but pp x vpp = "
                         f"{plan.pp} x {plan.parallel.vpp}")
    try:
        check_bounds(plan.bounds(), int(plan.model.num_layers))
    except ValueError as exc:
        raise InputError(f"{what}.stages", str(exc)) from None
    try:
        sched = plan.parsed_schedule()
    except ValueError as exc:
        raise InputError(f"{what}.{str(exc).split(':')[0]}", str(exc).split(": ", 1)[1]) from None
    for rank in sched:
        if not 0 <= rank < plan.pp:
            raise InputError(f"{what}.schedule.{rank}", f"rank {rank} is not in 0..{plan.pp - 1}")
    n = plan.num_stages
    for key in ("f", "i", "w", "act_bytes", "act_w_bytes", "static_bytes", "out_bytes"):
        if len(plan.stage_costs[key]) != n:
            raise InputError(f"{what}.stage_costs.{key}", f"has {len(plan.stage_costs[key])} "
                             f"entries for {n} stages")
    if len(plan.stage_costs.get("work_bytes", ())) not in (0, n):
        raise InputError(f"{what}.stage_costs.work_bytes", f"has {len(plan.stage_costs['work_bytes'])} entries "
                         f"for {n} stages", "give one transient byte count per stage, or leave work_bytes out")
    if len(plan.stage_costs.get("b", ())) not in (0, n):
        raise InputError(f"{what}.stage_costs.b", f"has {len(plan.stage_costs['b'])} entries for {n} stages",
                         "give one full-backward time per stage, or leave b out (I + W)")
    _check_times(plan.stage_costs, what)
    _check_cluster_section(plan.cluster, f"{what}.cluster")
    _check_optional_fields(plan, what)


# Optional fields that replan, replay and the exports read, with their types and
# smallest values (the schema leaves ``solver`` open and ``costs`` untyped).
_OPTIONAL: tuple[tuple[str, str, type | tuple[type, ...], float], ...] = (
    ("solver", "seed", int, 0), ("solver", "partition", str, 0), ("solver", "schedule", str, 0),
    ("costs", "seq_len", int, 0), ("costs", "microbatch_size", int, 1), ("costs", "scale", (int, float), 1e-9),
    ("costs", "source", str, 0), ("costs", "device", str, 0),
)


def _check_optional_fields(plan: Plan, what: str) -> None:
    for section, key, kind, low in _OPTIONAL:
        data = getattr(plan, section)
        if not isinstance(data, Mapping) or key not in data:
            continue
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, kind) or (kind is not str and value < low):
            expected = "text" if kind is str else f"a number >= {low:g}"
            raise InputError(f"{what}.{section}.{key}", f"expected {expected}, got {value!r:.40}")
    training = plan.cluster.settings
    for key, limit in (("seq_len", "seq_len"), ("micro_batch_size", "microbatch_size"), ("global_batch", "global_batch")):
        check_batch_value(f"{what}.cluster.training.{key}", limit, training.get(key, 1))
    for key, limit in (("seq_len", "seq_len"), ("microbatch_size", "microbatch_size")):
        if isinstance(plan.costs, dict) and plan.costs.get(key):
            check_batch_value(f"{what}.costs.{key}", limit, plan.costs[key])


def _check_cluster_section(cl: Any, where: str) -> None:
    """The parts of the plan's cluster section that simulate/replan read (MFU)."""
    if not isinstance(cl, Mapping):
        raise InputError(where, f"expected an object, got {type(cl).__name__}")
    for key in ("gpu", "training"):
        if key in cl and not isinstance(cl[key], Mapping):
            raise InputError(f"{where}.{key}", f"expected an object, got {type(cl[key]).__name__}")
    peak = cl.get("gpu", {}).get("peak_flops", 1.0)
    if isinstance(peak, bool) or not isinstance(peak, (int, float)) or not 0 < peak < 1e20:
        raise InputError(f"{where}.gpu.peak_flops", f"expected FLOP/s > 0, got {peak!r:.40}")
    gpus = cl.get("num_gpus", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 < gpus <= 1 << 24:
        raise InputError(f"{where}.num_gpus", f"expected a positive GPU count, got {gpus!r:.40}")


def _check_times(sc: dict[str, Any], what: str) -> None:
    """Stage times are non-negative numbers and not all zero (a plan of zero
    costs simulates to a 0 s step and an unbounded MFU)."""
    units = {"f": "seconds", "i": "seconds", "w": "seconds", "b": "seconds", "flops": "flops", "act_bytes": "bytes",
             "act_w_bytes": "bytes", "static_bytes": "bytes", "out_bytes": "bytes", "work_bytes": "bytes"}
    for key, unit in units.items():
        for s, value in enumerate(sc.get(key, ())):
            check_cost_value(f"{what}.stage_costs.{key}[{s}]", value, unit)
    for k, pair in enumerate(sc.get("fused", [])):
        for key in ("time", "serial"):
            if key in pair:
                check_cost_value(f"{what}.stage_costs.fused[{k}].{key}", pair[key], "seconds")
    if not any(sc["f"]) or not (any(sc["i"]) or any(sc["w"])):
        raise InputError(f"{what}.stage_costs", "every F time or every backward (I, W) time is 0",
                         "re-plan, or give the measured stage times")


def stage_costs_to_dict(sc: StageCosts) -> dict[str, Any]:
    """JSON form of ``StageCosts`` (ranks live in ``stages``)."""
    return {
        "f": list(sc.f), "i": list(sc.i), "w": list(sc.w),
        "act_bytes": list(sc.act_bytes), "act_w_bytes": list(sc.act_w_bytes),
        "static_bytes": list(sc.static_bytes), "out_bytes": list(sc.out_bytes),
        "flops": list(sc.flops),
        **({"b": list(sc.b)} if sc.b else {}),
        **({"work_bytes": list(sc.work_bytes)} if sc.work_bytes else {}),
        "fused": [{"f_stage": a, "b_stage": b, "time": t, "serial": sc.serial_fused.get((a, b), t)}
                  for (a, b), t in sorted(sc.fused.items())],
        "p2p": {"latency_s": sc.p2p.latency_s, "bandwidth": sc.p2p.bandwidth},
        **({"p2p_links": [{"latency_s": p.latency_s, "bandwidth": p.bandwidth} for p in sc.links]}
           if sc.links else {}),
        **({"site_hop": {"count": sc.site_hop.count, "latency_s": sc.site_hop.link.latency_s,
                         "bandwidth": sc.site_hop.link.bandwidth}} if sc.site_hop else {}),
    }


def stage_costs_from_dict(d: dict[str, Any], ranks: list[int]) -> StageCosts:
    """Inverse of ``stage_costs_to_dict``."""
    return StageCosts(
        f=tuple(d["f"]), i=tuple(d["i"]), w=tuple(d["w"]),
        act_bytes=tuple(int(x) for x in d["act_bytes"]),
        act_w_bytes=tuple(int(x) for x in d["act_w_bytes"]),
        static_bytes=tuple(int(x) for x in d["static_bytes"]),
        out_bytes=tuple(int(x) for x in d["out_bytes"]),
        flops=tuple(d.get("flops", ())),
        b=tuple(d.get("b", ())),
        work_bytes=tuple(int(x) for x in d.get("work_bytes", ())),
        ranks=tuple(ranks),
        fused={(e["f_stage"], e["b_stage"]): e["time"] for e in d.get("fused", [])},
        serial_fused={(e["f_stage"], e["b_stage"]): e.get("serial", e["time"]) for e in d.get("fused", [])},
        p2p=P2PCost(**d.get("p2p", {})),
        links=tuple(P2PCost(**p) for p in d.get("p2p_links", ())),
        site_hop=(SiteHop(count=d["site_hop"]["count"], link=P2PCost(latency_s=d["site_hop"]["latency_s"],
                                                                      bandwidth=d["site_hop"]["bandwidth"]))
                  if "site_hop" in d else None),
    )


def without_wall_s(data: Any) -> Any:
    """``data`` (a plan as JSON data) with every ``wall_s`` key dropped, at any depth: what
    stays is the same for the same inputs, seed and ``--work`` ([Note: work budget] in
    ``solvers.schedule.search.budget``); only timings differ run to run."""
    if isinstance(data, dict):
        return {k: without_wall_s(v) for k, v in data.items() if k != "wall_s"}
    if isinstance(data, list):
        return [without_wall_s(v) for v in data]
    return data


def load_plan_file(path: str | os.PathLike[str]) -> Plan:
    """Load and check a plan JSON file."""
    return Plan.from_dict(read_json(path, what="plan"), what="plan")


