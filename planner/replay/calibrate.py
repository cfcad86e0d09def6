"""Calibration: the runtime costs a per-layer table misses, measured by a calibration
replay, and the calibrated timeline, in which ranks that share CPU cores slow each other
down (sections below, each with its notes).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from planner.core.costs import P2PCost
from planner.core.plan import Plan
from planner.core.schedule import COMPUTE_KINDS, OVERLAP, ActionKind, Schedule
from planner.core.simulate import SimResult, simulate
from planner.core.stage_costs import StageCosts
from planner.replay.measure import Sample, action_timeline, rank_samples

__all__ = ["Calibration", "measure_calibration", "calibrated_costs", "simulate_with_calibration", "calibrated_plan",
           "torch_first_stage", "with_split_kinds", "splits_stage0", "KINDS", "simulate_shared"]


# ---- runtime calibration ------------------------------------------------------------------------
# What a per-layer cost table misses about the runtime, measured by one replay, and its use.
#
# [Note: runtime calibration] A cost table times each layer type by itself
# (``planner.replay.costs``: every rank at once, so with the cores as busy as they were then);
# the pipeline runtime runs whole stages one action at a time, with Python work of
# its own between actions, messages between ranks, and (on CPU) ranks that share the
# machine's cores with each other and with other jobs. Measured on one machine, the
# decomposition (``planner.replay.measure``) shows where the step goes: actions run about twice as
# long while the other rank computes as while it waits (two ranks, two cores, one of
# them busy with another job), which no fixed per-action duration can express.
#
# A *calibration replay* (a plan of its own, never one being judged; best run in the
# same launch as the judged plans, its steps alternating with theirs:
# ``replay_interleaved``) measures, over all its timed steps, ranks and actions
# (``planner.replay.measure.rank_samples``), relative to the durations its table predicts:
#
# - per kind, a least-squares line ``measured / predicted = a + b x others_busy`` over
#   the actions of that kind (others_busy: share of the other ranks computing while it
#   ran): ``alone_scale = a`` (an action running by itself, relative to the table) and
#   ``slowdown = (a + b) / a`` (its mean duration while every other rank computes,
#   relative to alone; at least 1, sharing never speeds an action up). A kind the
#   replay did not run takes B's figures (I, W) or F's. [Note: mean durations] The
#   line is drawn through durations, not rates, on purpose: other jobs on the machine
#   come and go within seconds (with one running, two ranks share one core and a shared
#   action takes 2x; without, 1x), so what a step's mean is made of is the *mean*
#   duration of a shared action, (1 + p) x alone for a share p of the time with the
#   other job, which a fit of rates would put at 1 / (1 - p / 2) x alone, too low;
# - ``between_actions_s``: mean gap before an action that waited for nothing (the
#   runtime's own work between actions), added to every action;
# - ``p2p_latency_s``: mean gap between a producer's end on one rank and its
#   consumer's start when the consumer waited for it, less ``between_actions_s`` (now
#   inside the action) and the bytes / bandwidth term the simulator adds itself;
# - ``step_overhead_s``: median of (reported step - time from the first action's start
#   on any rank to the last action's end on any rank): barrier exit, the final sends
#   waited before ``step()`` returns, the skew of the ranks' starts.
#
# On GPU (no machine-wide clock for the ranks' spans) only the alone scale is measured:
# no slowdown, no split of the gaps.
#
# Means, not medians, for the per-action terms: a step is a sum of many actions, and
# its mean is the sum of their means. Using it (``simulate_with_calibration``): stage costs become alone
# durations (``calibrated_costs``) and ``simulate_shared`` (below) re-times the
# schedule with the slowdown; the step overhead is added to its step. Every figure is
# measured on the calibration replay (the line is a fit to its actions), never on the
# plans being judged. It holds while the machine's load stays as it was: a calibration
# taken minutes earlier, under other outside load, can be off by tens of percent, which
# is why the benchmark runs the calibration plan alternating with the judged ones.


KINDS = COMPUTE_KINDS
_F, _I, _W, _B = ActionKind.F, ActionKind.I, ActionKind.W, ActionKind.B
_FALLBACK = {_F: (_F, _B), _B: (_B, _F), _I: (_I, _B, _F), _W: (_W, _B, _F),
             OVERLAP: (OVERLAP, _F, _B)}


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Runtime costs a per-layer table does not hold (see [Note: runtime calibration])."""

    alone_scale: dict[str, float] = field(default_factory=dict)
    """Kind -> duration of an action running alone / the table's duration for it."""
    slowdown: dict[str, float] = field(default_factory=dict)
    """Kind -> duration while every other rank computes / duration alone (1 = no sharing)."""
    between_actions_s: float = 0.0
    """Runtime work before each action, seconds (alone)."""
    p2p_latency_s: float | None = None
    """Per-message latency as the runtime experiences it; None keeps the table's."""
    step_overhead_s: float = 0.0
    """Step start and end overhead, seconds per step."""
    samples: dict[str, int] = field(default_factory=dict)
    """How many measured actions (per kind), messages and steps the figures come from."""
    source: str = ""
    """Which replay measured it."""

    def alone(self, kind: str) -> float:
        """Alone scale of ``kind`` (or of its fallback kind; 1 when none was measured)."""
        return _lookup(self.alone_scale, kind)

    def shared(self, kind: str) -> float:
        """Slowdown of ``kind`` (or of its fallback kind; 1 when none was measured)."""
        return _lookup(self.slowdown, kind)

    @property
    def missing(self) -> list[str]:
        """Kinds without their own measurement (a fallback is used)."""
        return [k for k in KINDS if k not in self.alone_scale]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the report's ``calibration``)."""
        return {"alone_scale": dict(self.alone_scale), "slowdown": dict(self.slowdown),
                "between_actions_s": self.between_actions_s, "p2p_latency_s": self.p2p_latency_s,
                "step_overhead_s": self.step_overhead_s, "samples": dict(self.samples),
                "missing": self.missing, "source": self.source}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Calibration":
        """Inverse of ``to_dict``."""
        return cls(alone_scale=dict(data.get("alone_scale") or {}), slowdown=dict(data.get("slowdown") or {}),
                   between_actions_s=float(data.get("between_actions_s") or 0.0),
                   p2p_latency_s=data.get("p2p_latency_s"),
                   step_overhead_s=float(data.get("step_overhead_s") or 0.0),
                   samples=dict(data.get("samples") or {}), source=str(data.get("source") or ""))


def _lookup(table: dict[str, float], kind: str) -> float:
    return next((table[k] for k in _FALLBACK.get(kind, (kind,)) if k in table), 1.0)


def _line(samples: list[Sample]) -> tuple[float, float] | None:
    """(alone scale, slowdown): least squares of measured / predicted against others_busy;
    None when no sample has a predicted duration (a kind torch runs as a no-op, such as
    stage 0's I on a pp 1 plan with an I/W split: [Note: torch first stage])."""
    pts = [(s["others_busy"] or 0.0, s["dur"] / s["pred"]) for s in samples if s["pred"] > 0]
    if not pts:
        return None
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    flat = statistics.fmean(ys), 1.0
    if len(pts) < 3 or statistics.pvariance(xs) < 1e-4:
        return flat  # no spread of sharing to measure a slowdown from
    slope, intercept = statistics.linear_regression(xs, ys)
    if intercept <= 0:
        return flat
    return intercept, max(1.0, (intercept + slope) / intercept)


def measure_calibration(plan: Plan, sim: SimResult, ranks: list[dict[str, Any]], *,
                        source: str) -> Calibration:
    """Calibration from every timed step of one replay (``ranks``: what each rank gathered);
    ``sim`` is the replay's prediction from the uncalibrated table."""
    by_kind: dict[str, list[Sample]] = {}
    between: list[float] = []
    after_ready: list[float] = []
    edges: list[float] = []
    w0_full = splits_stage0(plan.parsed_schedule())
    for k in range(len(ranks[0]["steps"])):
        steps = [r["steps"][k] for r in ranks]
        timelines = [action_timeline(plan, r["rank"], s["spans"]) for r, s in zip(ranks, steps)]
        bases = [s.get("base_s") for s in steps]
        aligned = all(b is not None for b in bases)  # else gaps cannot be told apart (GPU)
        for samples in rank_samples(sim, timelines, bases):
            for j, s in enumerate(samples):
                by_kind.setdefault(_calibrated_as(s, w0_full), []).append(s)
                if j and aligned:
                    (after_ready if s["waited"] else between).append(s["gap"] - s["wait"])
        edges.append(_step_edges(steps, timelines, bases))
    fits = {k: _line(v) for k, v in by_kind.items() if k in KINDS}
    lines = {k: fit for k, fit in fits.items() if fit is not None}  # else the fallback kind's
    gap = statistics.fmean(between) if between else 0.0
    latency = None
    if after_ready and plan.num_stages > 1:
        sc = plan.parsed_stage_costs()
        wire = statistics.fmean(b / sc.p2p.bandwidth for b in sc.out_bytes[:-1])
        latency = max(0.0, statistics.fmean(after_ready) - gap - wire)
    return Calibration(alone_scale={k: a for k, (a, _) in lines.items()},
                       slowdown={k: c for k, (_, c) in lines.items()}, between_actions_s=gap,
                       p2p_latency_s=latency, step_overhead_s=statistics.median(edges),
                       samples={**{k: len(v) for k, v in by_kind.items()}, "messages": len(after_ready),
                                "between_actions": len(between), "steps": len(edges)},
                       source=source)


def _calibrated_as(sample: Sample, w0_full: bool) -> str:
    """The kind a sample calibrates: stage 0's W is torch's full backward when the schedule
    splits stage 0 ([Note: torch first stage]), predicted as I + W like a B action, and one
    autograd pass costs less than its I + W, so it calibrates B, not W."""
    if w0_full and sample["kind"] == _W and sample["stage"] == 0:
        return _B
    return sample["kind"]


def _step_edges(steps: list[dict[str, Any]], timelines: list[list[dict[str, Any]]],
                bases: list[float | None]) -> float:
    """Reported step (slowest rank, from its own start) - first action start to last action
    end over all ranks (clocks aligned when ``bases`` are known)."""
    shift = [b or 0.0 for b in bases] if all(b is not None for b in bases) else [0.0] * len(bases)
    first = min(shift[r] + t[0]["start"] for r, t in enumerate(timelines) if t)
    last = max(shift[r] + t[-1]["end"] for r, t in enumerate(timelines) if t)
    return max(s["step_s"] for s in steps) - (last - first)


def with_split_kinds(full: Calibration, split: Calibration) -> Calibration:
    """``full`` (a calibration plan with full backwards) with I and W taken from ``split`` (one
    with the backward split into I and W), so that every kind is measured like for like: a
    full backward costs less than its I + W on torch's runtime (one autograd pass against
    two), so I and W borrowing B's scale predict split plans too fast."""
    kinds = [k for k in (_I, _W) if k in split.alone_scale]
    return replace(full, alone_scale={**full.alone_scale, **{k: split.alone_scale[k] for k in kinds}},
                   slowdown={**full.slowdown, **{k: split.slowdown[k] for k in kinds}},
                   samples={**full.samples, **{k: split.samples[k] for k in kinds}},
                   source=f"{full.source}; I and W from {split.source}")


def calibrated_costs(sc: StageCosts, cal: Calibration, *, w0_full: bool = False) -> StageCosts:
    """Alone durations: each kind scaled by its ``alone_scale``, the between-action work added
    once per action (to F, to I; to W only when W was measured on its own), and the
    measured P2P latency. A full backward B is its own table time (``StageCosts.b_time``)
    at B's scale when the calibration measured B, else the calibrated I + W scaled by
    the table's B / (I + W).
    ``w0_full``: stage 0's W is torch's full backward (``torch_first_stage`` applied to
    ``sc``), scaled as B (``_calibrated_as``)."""
    a = {k: cal.alone(k) for k in KINDS}
    g = cal.between_actions_s
    g_w = g if ActionKind.W in cal.alone_scale else 0.0
    f = tuple(a[ActionKind.F] * x + g for x in sc.f)
    i = tuple(a[ActionKind.I] * x + g for x in sc.i)
    w = tuple(a[ActionKind.W] * x + g_w for x in sc.w)
    if w0_full:
        w = (a[ActionKind.B] * sc.w[0] + g, *w[1:])
    if ActionKind.B in cal.alone_scale:
        b = tuple(a[ActionKind.B] * sc.b_time(s) + g for s in range(sc.num_stages))
    else:
        b = tuple((x + y + g_w) * sc.b_time(s) / max(sc.i[s] + sc.w[s], 1e-30)
                  for s, (x, y) in enumerate(zip(i, w))) if sc.b else ()
    fused = {(fs, bs): t - sc.f[fs] - sc.i[bs] + f[fs] + i[bs] - g for (fs, bs), t in sc.fused.items()}
    p2p = sc.p2p if cal.p2p_latency_s is None else P2PCost(latency_s=cal.p2p_latency_s,
                                                          bandwidth=sc.p2p.bandwidth)
    return replace(sc, f=f, i=i, w=w, b=b, fused=fused, p2p=p2p)


def simulate_with_calibration(schedule: Schedule, sc: StageCosts, cal: Calibration) -> tuple[float, SimResult]:
    """(step, timeline) of ``schedule`` simulated on uncalibrated stage costs ``sc`` corrected
    by ``cal``: alone durations, the measured slowdown while ranks share, step overhead."""
    slowdown = {k: cal.shared(k) for k in (*KINDS, OVERLAP)}
    w0_full = splits_stage0(schedule) and sc.i[0] == 0  # torch_first_stage applied
    sim = simulate_shared(schedule, calibrated_costs(sc, cal, w0_full=w0_full), slowdown)
    return sim.step_time + cal.step_overhead_s, sim


def splits_stage0(schedule: Schedule) -> bool:
    """Whether ``schedule`` splits stage 0's backward into I and W."""
    return any(p.stage == 0 and p.kind == _I for acts in schedule.values() for a in acts for p in a.parts)


def torch_first_stage(sc: StageCosts, schedule: Schedule) -> StageCosts:
    """Stage costs as torch's runtime executes them ([Note: torch first stage] in
    ``planner.replay.predict``): when ``schedule`` splits stage 0's backward, its I is a
    no-op and its W the whole backward."""
    if not splits_stage0(schedule) or sc.i[0] == 0:
        return sc
    moved = sc.i[0]
    fused = {k: (t - moved if k[1] == 0 else t) for k, t in sc.fused.items()}
    # W becomes the full backward; B (``b``, or the new I + W) stays the full backward
    return replace(sc, i=(0.0, *sc.i[1:]), w=(sc.b_time(0), *sc.w[1:]), fused=fused)


def calibrated_plan(plan: Plan, cal: Calibration) -> Plan:
    """``plan`` whose prediction is the calibrated one (``plan.costs["calibration"]``; the
    uncalibrated prediction kept beside it). Its stage costs stay the table's; the
    calibrated timeline runs them as torch does (``torch_first_stage``), as the
    calibration's per-kind fit saw them."""
    schedule = plan.parsed_schedule()
    step, sim = simulate_with_calibration(schedule, torch_first_stage(plan.parsed_stage_costs(), schedule), cal)
    predicted = replace(plan.predicted, step_time_s=step, busy_s=sim.busy, bubble_fraction=sim.bubble_fraction
                        ).with_other(uncalibrated_step_time_s=plan.predicted.step_time_s)
    return replace(plan, predicted=predicted, costs={**plan.costs, "calibration": cal.to_dict()})


# ---- shared cores -------------------------------------------------------------------------------
# A step's timeline when the pipeline ranks share CPU cores (replays on one machine).
#
# ``planner.core.simulate`` gives every action a fixed duration: right when each rank
# owns its device. Replayed on CPU, the ranks are processes on one machine's cores,
# shared with each other and with whatever else runs there; an action then runs
# slower while another rank computes (measured: about 2x with two ranks on two cores
# and one core taken by another job). This module re-times a schedule with that
# effect and nothing else changed:
#
# - each action has an amount of *work*: its duration when it runs alone (the stage
#   costs given);
# - while it runs, it progresses at rate ``1 / (1 + (c[kind] - 1) x b / (R - 1))``,
#   where b of the other R - 1 ranks are computing at that moment and ``c[kind]`` is
#   the measured slowdown of an action of that kind while all others compute (1 = no
#   sharing): alone it takes its work, beside every other rank c times its work.
#   Linear in b is an assumption; with two ranks only b = 0 or 1 occur;
# - everything else is as in ``planner.core.simulate``: per-rank order, dependencies
#   from ``compile_schedule``, a point-to-point delay on every edge between ranks.
#
# It is event driven: time advances to the next action end or the next moment a
# waiting action's inputs have arrived, and every running action's remaining work
# shrinks at its current rate in between.


_EPS = 1e-12


def simulate_shared(schedule: Schedule, costs: StageCosts, slowdown: dict[str, float]) -> SimResult:
    """Simulate ``schedule`` with ``costs`` as alone durations and ``slowdown[kind]`` while all
    other ranks compute (module docstring). Memory figures are those of the fixed-duration
    simulation; the critical path is left empty."""
    base = simulate(schedule, costs)
    comp = base.compiled
    n = len(comp.actions)
    work = [base.end[k] - base.start[k] for k in range(n)]
    delay = [costs.p2p_time(s) for s in range(costs.num_stages)] + [0.0]
    ranks = len(comp.order)
    extra = [slowdown.get(a.kind, slowdown.get(ActionKind.F, 1.0)) - 1.0 for a in comp.actions]
    start, end = [0.0] * n, [float("inf")] * n
    pos = [0] * ranks
    running: dict[int, int] = {}  # rank -> node
    free_at = [0.0] * ranks
    t = 0.0
    while True:
        pending = []
        for r in range(ranks):
            if r in running or pos[r] >= len(comp.order[r]):
                continue
            node = comp.order[r][pos[r]]
            deps = [(d, b) for d, b in zip(comp.deps[node], comp.bounds[node]) if d != n]
            if all(end[d] < float("inf") for d, _ in deps):
                ready = max([free_at[r], *(end[d] + delay[b] for d, b in deps)])
                if ready <= t + _EPS:
                    running[r] = node
                    start[node] = t
                else:
                    pending.append(ready)
        if not running:
            if not pending:
                break
            t = min(pending)
            continue
        busy = len(running)
        rate = {r: 1.0 / (1.0 + extra[k] * (busy - 1) / max(1, ranks - 1)) for r, k in running.items()}
        step = min(work[k] / rate[r] for r, k in running.items())
        nxt = min([t + step, *pending])
        for r, k in list(running.items()):
            work[k] -= rate[r] * (nxt - t)
            if work[k] <= _EPS * max(1.0, nxt):
                end[k], free_at[r] = nxt, nxt
                pos[r] += 1
                del running[r]
        t = nxt
    if any(e == float("inf") for e in end):
        raise ValueError("shared-core simulation stalled: the schedule does not finish")
    busy_time = [sum(end[k] - start[k] for k in row) for row in comp.order]
    shared = replace(base, step_time=max(end, default=0.0), start=start, end=end, busy=busy_time)
    shared.memory, shared.critical_path = base.memory, []  # cached properties, set: see the docstring
    return shared
