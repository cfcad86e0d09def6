"""Per-stage costs: what the simulator, validator and schedule solvers consume.

Built from a ``CostTable`` and a partition (layer range per stage), or written by hand
(bring-your-own-costs: one layer per stage). Fused F&B costs follow Megatron's combined 1F1B
(megatron/core/models/common/model_chunk_schedule_plan.py): a
stage running F of layers ``Lf`` beside the input-gradient of layers ``Lb`` pairs
``Lf[j]`` with ``reversed(Lb)[j]`` (Megatron pairs F.layer[0] with B.layer[last]);
leftover layers of the longer side run at serial cost.

A full backward B takes ``b`` when the table measured it, else ``i + w``
(``planner.core.costs`` [Note: full backward]); fused beside a forward it takes the
pair's F-beside-I time plus what B costs beyond I (``fused_b_time``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.core.costs import CostTable, P2PCost
from planner.core.p2p import SiteHop
from planner.core.schedule import OVERLAP, Action, ActionKind

__all__ = ["StageCosts", "stage_costs", "fused_range_cost", "held_bytes", "rank_static_bytes", "memory_order"]


def memory_order(action: Action) -> tuple[Action, ...]:
    """The parts of ``action`` in the order their activation memory changes. A fused F&B pair
    frees its backward part before its forward part allocates, both at the pair's start:
    Megatron's combined 1F1B runs forward layer j of one microbatch beside backward layer L-1-j
    of the previous one, layer by layer (megatron/core/models/common/model_chunk_schedule_plan.py,
    ``TransformerLayerSchedulePlan.run``; megatron/core/pipeline_parallel/combined_1f1b.py), so
    what the forward allocates replaces what the backward frees and the pair holds about one
    microbatch's activations, not two."""
    if action.kind != OVERLAP:
        return action.parts
    return tuple(sorted(action.parts, key=lambda p: p.kind == ActionKind.F))


def held_bytes(full: int, w_only: int, act: int, act_w: int) -> int:
    """Activation bytes a stage holds with ``full`` microbatches past F but not I/B and
    ``w_only`` past I but not W: what ``StageCosts.released`` leaves after each kind."""
    return full * act + w_only * act_w


def rank_static_bytes(static: list[int], work: list[int]) -> int:
    """Bytes a rank holds whatever runs, from its stages' static and transient work bytes:
    all the static bytes, and the largest work bytes (one layer runs at a time)."""
    return sum(static) + max(work, default=0)


@dataclass(frozen=True, kw_only=True)
class StageCosts:
    """Costs of each stage for one microbatch, and where each stage runs."""

    f: tuple[float, ...]
    """Forward, exposed all-to-all included, seconds."""
    i: tuple[float, ...]
    """Input-gradient, exposed all-to-all included, seconds."""
    w: tuple[float, ...]
    """Weight-gradient, seconds."""
    act_bytes: tuple[int, ...]
    """Activation bytes a forward allocates."""
    act_w_bytes: tuple[int, ...]
    """Part of ``act_bytes`` held after the input-gradient until the weight-gradient."""
    static_bytes: tuple[int, ...]
    """Parameters + gradients + optimizer state of the stage."""
    out_bytes: tuple[int, ...]
    """Activation bytes sent to the next stage (and gradient bytes received back)."""
    ranks: tuple[int, ...]
    """Rank of each stage."""
    fused: dict[tuple[int, int], float] = field(default_factory=dict)
    """(forward stage, backward stage) -> time of F beside I, for stage pairs on one rank."""
    serial_fused: dict[tuple[int, int], float] = field(default_factory=dict)
    """Same pairs run without overlap (F then I), for reporting hidden time."""
    b: tuple[float, ...] = ()
    """Full backward (one pass), exposed all-to-all included, seconds; empty: ``i + w``."""
    p2p: P2PCost = field(default_factory=P2PCost)
    """Pipeline send/receive link."""
    site_hop: SiteHop | None = None
    """The inter-site link the boundaries between sites use instead of ``p2p``; None: one site."""
    flops: tuple[float, ...] = ()
    """Model FLOPs (forward + backward) of each stage per microbatch."""
    work_bytes: tuple[int, ...] = ()
    """Largest transient bytes of one layer of each stage (``LayerCost.work_bytes``); empty: none."""
    links: tuple[P2PCost, ...] = ()
    """Link from each stage to the next (mixed fleets: ``CostTable.link``); empty: ``p2p`` everywhere."""

    @property
    def num_stages(self) -> int:
        """Number of stages."""
        return len(self.f)

    @property
    def num_ranks(self) -> int:
        """Number of ranks."""
        return max(self.ranks) + 1

    def fused_time(self, f_stage: int, b_stage: int) -> float:
        """F of ``f_stage`` beside the input-gradient of ``b_stage``."""
        return self.fused.get((f_stage, b_stage), self.f[f_stage] + self.i[b_stage])

    def b_time(self, stage: int) -> float:
        """Full backward B of ``stage``: ``b`` when measured, else I + W."""
        return self.b[stage] if self.b else self.i[stage] + self.w[stage]

    def fused_b_time(self, f_stage: int, b_stage: int) -> float:
        """F of ``f_stage`` beside a full backward B of ``b_stage``: the pair beside its
        input-gradient, then what B costs beyond it (never less than nothing)."""
        return self.fused_time(f_stage, b_stage) + max(0.0, self.b_time(b_stage) - self.i[b_stage])

    def pair_time(self, f_stage: int, b_stage: int, full: bool) -> float:
        """A fused pair: F of ``f_stage`` beside the I (``full``: the B) of ``b_stage``."""
        return self.fused_b_time(f_stage, b_stage) if full else self.fused_time(f_stage, b_stage)

    def kind_time(self, kind: str, stage: int) -> float:
        """Seconds a plain F, I, W or B of ``stage`` occupies its rank."""
        if kind == ActionKind.F:
            return self.f[stage]
        if kind == ActionKind.I:
            return self.i[stage]
        if kind == ActionKind.W:
            return self.w[stage]
        return self.b_time(stage)

    def duration(self, action: Action) -> float:
        """Seconds ``action`` occupies its rank: the one duration rule of every timeline
        (simulator, list engine, ZB builder, CP-SAT)."""
        if action.kind == OVERLAP:
            fw, bw = action.sub
            return self.pair_time(fw.stage, bw.stage, bw.kind == ActionKind.B)
        return self.kind_time(action.kind, action.stage)

    def p2p_time(self, stage: int) -> float:
        """Seconds to send stage ``stage``'s output to the next stage (or its gradient back):
        over the inter-site link where that boundary joins two sites (``SiteHop``), else over the
        link between the two ranks' device groups on a mixed fleet (``links``), else ``p2p``."""
        hop = self.site_hop
        if hop is not None and hop.crosses(stage, self.ranks):
            return hop.link.time(self.out_bytes[stage])
        return (self.links[stage] if self.links else self.p2p).time(self.out_bytes[stage])

    def p2p_delays(self) -> list[float]:
        """``p2p_time`` of each stage boundary, and 0 last (index -1: a local dependency)."""
        return [self.p2p_time(s) for s in range(self.num_stages)] + [0.0]

    def allocated(self, kind: str, stage: int) -> int:
        """Activation bytes a task of ``kind`` on ``stage`` allocates at its start (F only)."""
        return self.act_bytes[stage] if kind == ActionKind.F else 0

    def released(self, kind: str, stage: int) -> int:
        """Activation bytes a task of ``kind`` on ``stage`` frees at its end: the one rule
        every memory model shares (simulator, validator, list scheduler, CP-SAT). F frees
        nothing (it allocates ``act_bytes`` at its start); I frees all but the share W
        keeps (``act_w_bytes``); W frees that share; a full backward B frees everything."""
        if kind == ActionKind.I:
            return self.act_bytes[stage] - self.act_w_bytes[stage]
        if kind == ActionKind.W:
            return self.act_w_bytes[stage]
        if kind == ActionKind.B:
            return self.act_bytes[stage]
        return 0

    def allocates(self, action: Action) -> int:
        """Activation bytes ``action`` allocates at its start (``allocated`` per part; a fused
        pair: its net raise, ``pair_net_bytes``, when positive)."""
        if action.kind != OVERLAP:
            return self.allocated(action.kind, action.stage)
        return max(0, self.pair_net_bytes(action))

    def frees(self, action: Action) -> int:
        """Activation bytes ``action`` releases at its end (``released`` per part; a fused pair:
        its net release, when ``pair_net_bytes`` is negative)."""
        if action.kind != OVERLAP:
            return self.released(action.kind, action.stage)
        return max(0, -self.pair_net_bytes(action))

    def pair_net_bytes(self, action: Action) -> int:
        """What a fused F&B pair changes on its rank: the forward part's allocation less what the
        backward part frees, both at the pair's start (``memory_order``)."""
        return sum(self.allocated(p.kind, p.stage) - self.released(p.kind, p.stage) for p in action.parts)

    def static_per_rank(self) -> list[int]:
        """Bytes each rank holds whatever runs (``rank_static_bytes`` of its stages)."""
        static: list[list[int]] = [[] for _ in range(self.num_ranks)]
        work: list[list[int]] = [[] for _ in range(self.num_ranks)]
        for s, r in enumerate(self.ranks):
            static[r].append(self.static_bytes[s])
            if self.work_bytes:
                work[r].append(self.work_bytes[s])
        return [rank_static_bytes(a, b) for a, b in zip(static, work)]


def fused_range_cost(table: CostTable, f_layers: range, b_layers: range) -> float:
    """Time of F over ``f_layers`` beside input-gradient over ``b_layers`` (see module doc)."""
    fl, bl = list(f_layers), list(reversed(b_layers))
    n = min(len(fl), len(bl))
    total = sum(table.ov(fl[j], bl[j]) for j in range(n))
    total += sum(table.layers[a].serial_f for a in fl[n:])
    total += sum(table.layers[b].serial_i for b in bl[n:])
    return total


def stage_costs(table: CostTable, bounds: list[tuple[int, int]], ranks: list[int]) -> StageCosts:
    """Aggregate a cost table over a partition (``bounds[s] = (start, end)`` layer range); times
    from the table of each stage's rank (``CostTable.for_rank``: its device group's), bytes
    from ``table`` (the same on every group)."""
    def total(attr: str, a: int, b: int, s: int | None = None) -> float:
        layers = (table if s is None else table.for_rank(ranks[s])).layers
        return sum(getattr(layers[k], attr) for k in range(a, b))

    fused, serial = {}, {}
    for sf, (fa, fb) in enumerate(bounds):
        for sb, (ba, bb) in enumerate(bounds):
            if ranks[sf] == ranks[sb]:
                fused[(sf, sb)] = fused_range_cost(table.for_rank(ranks[sf]), range(fa, fb), range(ba, bb))
                serial[(sf, sb)] = total("serial_f", fa, fb, sf) + total("serial_i", ba, bb, sb)
    S = len(bounds)
    return StageCosts(
        f=tuple(total("serial_f", a, b, s) for s, (a, b) in enumerate(bounds)),
        i=tuple(total("serial_i", a, b, s) for s, (a, b) in enumerate(bounds)),
        w=tuple(total("w", a, b, s) for s, (a, b) in enumerate(bounds)),
        act_bytes=tuple(int(total("act_bytes", a, b)) for a, b in bounds),
        act_w_bytes=tuple(int(total("act_w_bytes", a, b)) for a, b in bounds),
        static_bytes=tuple(int(total("static_bytes", a, b)) for a, b in bounds),
        work_bytes=(tuple(max(table.layers[k].work_bytes for k in range(a, b)) for a, b in bounds)
                    if any(lc.work_bytes for lc in table.layers) else ()),
        out_bytes=tuple(table.layers[b - 1].out_bytes for _, b in bounds),
        b=(tuple(total("serial_b", a, b, s) for s, (a, b) in enumerate(bounds))
           if any(lc.b is not None for lc in table.layers) else ()),
        ranks=tuple(ranks),
        fused=fused,
        serial_fused=serial,
        p2p=table.p2p,
        links=(tuple(table.link(ranks[s], ranks[s + 1]) for s in range(S - 1)) + (table.p2p,)
               if table.rank_links else ()),
        site_hop=table.site_hop,
        flops=tuple(total("flops", a, b) for a, b in bounds),
    )
