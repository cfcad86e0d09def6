"""Schedule-aware step-time estimate and exact memory of a partition, per layer range.

Given a schedule ORDER (from any generator) and a cost table, every quantity the
partition solvers need is a function of one stage's position and layer range
``[a, b)``, computed in O(1) after an O(N^2) precompute (``OverlapRangeCost``):

- ``work(s, a, b)``: busy time of stage s for the whole step. The schedule fixes how
  many plain F, I, B (its measured full backward, else I + W), W and fused F&B
  actions stage s runs
  (``stage_shapes``). A fused pair (F of stage p beside I of stage q) is charged
  ``rho_p x F_p`` to p and ``rho_q x I_q`` to q, with ``rho = OV(range) / (F + I)``
  the range's own overlap ratio; for p = q (every fused pair when vpp = 1) the two
  shares add up to exactly the simulator's ``fused_time``. With ``overlap=False``
  ``rho = 1``: fused pairs are costed serially (the serial-balanced ablation).
- ``memory(s, a, b)`` (one stage per rank): static bytes plus the peak activation
  bytes from ``solvers.partition.inflight.memory_points``: exactly the simulator's peak.

The estimate itself is [Note: step estimate] at ``StepModel.term``.

On a mixed fleet (``CostTable.rank_tables``) every time of stage s is read from its rank's
table and the memory limit is one per stage (``max_ends``): the homogeneous case is the
one where every stage reads the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.costs import CostTable
from planner.core.placement import Bounds
from planner.core.schedule import ActionKind, Schedule
from planner.core.stage_costs import held_bytes, rank_static_bytes
from solvers.partition.inflight import MemoryPoint, memory_points, peak_activation_bytes
from solvers.partition.overlap_cost import OverlapRangeCost
from solvers.partition.ranges import RangeMax, prefix_sums

__all__ = ["StageShape", "stage_shapes", "StepModel"]


@dataclass(frozen=True, kw_only=True)
class StageShape:
    """What one stage runs in one step under a schedule order."""

    f: int = 0
    """Plain forwards."""
    i: int = 0
    """Plain input-gradients."""
    b: int = 0
    """Plain full backwards (measured B, else I + W)."""
    w: int = 0
    """Plain weight-gradients."""
    fused_f: int = 0
    """Forwards run inside an OVERLAP_F_B pair."""
    fused_i: int = 0
    """Input-gradients (of I or B) run inside an OVERLAP_F_B pair."""
    fused_w: int = 0
    """Weight-gradients of full backwards run inside an OVERLAP_F_B pair (after the pair)."""
    warmup: int = 0
    """Plain forwards before the stage's first backward."""


def stage_shapes(schedule: Schedule, num_stages: int) -> list[StageShape]:
    """Count each stage's actions by kind (see ``StageShape``)."""
    cnt = [dict(f=0, i=0, b=0, w=0, fused_f=0, fused_i=0, fused_w=0, warmup=0) for _ in range(num_stages)]
    started = [False] * num_stages
    for acts in schedule.values():
        for a in acts:
            if a.sub:
                fw, bw = a.sub
                cnt[fw.stage]["fused_f"] += 1
                cnt[bw.stage]["fused_i"] += 1
                cnt[bw.stage]["fused_w"] += bw.kind == ActionKind.B
                started[bw.stage] = True
                continue
            key = a.kind.lower()
            cnt[a.stage][key] += 1
            if a.kind == ActionKind.F and not started[a.stage]:
                cnt[a.stage]["warmup"] += 1
            elif a.kind in (ActionKind.I, ActionKind.B):
                started[a.stage] = True
    return [StageShape(**c) for c in cnt]


class _Times:
    """Prefix sums of one cost table's times (one per device group of a mixed fleet)."""

    def __init__(self, table: CostTable, full_backward: bool, overlap: bool) -> None:
        layers = table.layers
        self.oc = OverlapRangeCost(table)
        back = [lc.serial_b if full_backward else lc.serial_i for lc in layers]
        self.fpre = prefix_sums([lc.serial_f for lc in layers])
        self.bpre = prefix_sums(back)
        self.trip = prefix_sums([lc.serial_f + b for lc, b in zip(layers, back)])
        self.rho = [table.ov(k, k) / (lc.serial_f + lc.serial_i)
                    if overlap and lc.serial_f + lc.serial_i > 0 else 1.0 for k, lc in enumerate(layers)]
        self.layers = layers


class StepModel:
    """O(1) work, estimate terms and memory of layer ranges under one schedule order."""

    def __init__(self, table: CostTable, schedule: Schedule, ranks: list[int], *,
                 overlap: bool = True) -> None:
        n, S = table.num_layers, len(ranks)
        self.num_layers, self.num_stages, self.ranks = n, S, list(ranks)
        self.overlap = overlap
        self.shapes = stage_shapes(schedule, S)
        self.points: dict[int, list[MemoryPoint]] = memory_points(schedule)
        self._stage_points = [sorted({(full, w) for p in self.points.get(ranks[s], [])
                                      for st, full, w in p if st == s}) for s in range(S)]
        self.first_stage = {r: min(s for s, q in enumerate(ranks) if q == r) for r in set(ranks)}
        layers = table.layers
        self._static = prefix_sums([lc.static_bytes for lc in layers])
        self._work = RangeMax([lc.work_bytes for lc in layers])
        self._act = prefix_sums([lc.act_bytes for lc in layers])
        self._act_w = prefix_sums([lc.act_w_bytes for lc in layers])
        self.full_backward = any(sh.b or sh.fused_w for sh in self.shapes)
        own: dict[int, _Times] = {}
        self._t = [own.setdefault(id(t), _Times(t, self.full_backward, overlap))
                   for t in (table.for_rank(r) for r in ranks)]
        self._layers = layers
        out = sorted(lc.out_bytes for lc in layers)
        links = table.rank_links or (table.p2p,)
        self.p2p = max(link.time(out[len(out) // 2]) for link in links) if S > 1 else 0.0

    # --- costs of one range ---------------------------------------------------------
    def ratio(self, s: int, a: int, b: int) -> float:
        """Overlapped / serial F+I of [a, b) on stage ``s``'s device (1 when overlap is off or
        nothing to hide)."""
        oc = self._t[s].oc
        serial = oc.serial(a, b)
        if not self.overlap or serial <= 0.0:
            return 1.0
        return oc.overlapped(a, b) / serial

    def work(self, s: int, a: int, b: int) -> float:
        """Busy time of stage ``s`` holding [a, b) over the whole step (module doc)."""
        sh, oc = self.shapes[s], self._t[s].oc
        f, i, w, bx = oc.forward(a, b), oc.backward(a, b), oc.weight(a, b), oc.full_extra(a, b)
        rho = self.ratio(s, a, b) if sh.fused_f or sh.fused_i else 1.0
        return ((sh.f + rho * sh.fused_f) * f + (sh.i + sh.b + rho * sh.fused_i) * i
                + sh.w * w + sh.b * bx + sh.fused_w * max(0.0, bx))

    def head(self, s: int, a: int) -> float:
        """Chain before stage ``s`` starting at layer ``a`` (first input) and after it (last gradient);
        on a mixed fleet the layers before ``a`` are timed on stage ``s``'s device (an estimate)."""
        t = self._t[s]
        return t.fpre[a] + t.bpre[a] + 2 * s * self.p2p

    def idle(self, s: int, a: int, b: int) -> float:
        """Wait for the first gradient not covered by warm-up forwards (module doc)."""
        t = self._t[s]
        f = t.oc.forward(a, b)
        down = t.trip[self.num_layers] - t.trip[b] + 2 * (self.num_stages - 1 - s) * self.p2p
        return max(0.0, f + down - self.shapes[s].warmup * f)

    def term(self, s: int, a: int, b: int) -> float:
        """Estimate term of stage ``s`` on [a, b) with one stage per rank.

        [Note: step estimate] For one stage per rank the estimate is ``max_s term(s, a_s, b_s)``
        with

            term = head(a) + work(s, a, b) + idle(s, a, b) + tail(a)
            head(a) = sum of serial F over layers [0, a) + s x p2p      (first input arrives)
            tail(a) = sum of serial I (or B where backwards are full) over [0, a) + s x p2p
                      (the last gradient still has to travel back to stage 0)
            idle    = max(0, F_s + down(b) - warmup_s x F_s)
            down(b) = serial F + I (or B) over [b, N) + 2 (S-1-s) x p2p (first microbatch's round
                      trip below s; stage s covers it with its ``warmup_s`` forwards)

        Each term is the length of a chain of work every schedule of this order contains:
        stage s cannot start before its first input arrives, is busy for ``work`` plus the
        wait for its first gradient, and its last gradient must reach stage 0. When one stage
        is the bottleneck and stays busy from its first backward to its last, the chain
        through it IS the critical path: for equal stages under 1F1B the last stage's term is
        ``(M + S - 1)(F + B)``, the classic PipeDream-flush/Megatron step (Narayanan et al.,
        SC'21, sec. 2.2), and the tests check ``estimate == simulate`` on such instances.
        Because each term depends only on its own stage's position and range, the min-max DP
        in ``solvers.partition.ranges`` is exact for this objective (not just for the max stage).

        For several stages per rank (vpp > 1) a rank's chain is
        ``head(first stage) + sum of its stages' work + tail(first stage)``; the rank sums
        couple non-adjacent stages, which is what ``solvers.partition.virtual`` (CP-SAT) solves.
        """
        return self.head(s, a) + self.work(s, a, b) + self.idle(s, a, b)

    def estimate(self, bounds: Bounds) -> float:
        """Step-time estimate of a partition (one or several stages per rank)."""
        if len(set(self.ranks)) == self.num_stages:
            return max(self.term(s, a, b) for s, (a, b) in enumerate(bounds))
        load: dict[int, float] = {}
        for s, (a, b) in enumerate(bounds):
            load[self.ranks[s]] = load.get(self.ranks[s], 0.0) + self.work(s, a, b)
        return max(self.head(f, bounds[f][0]) + load[r] for r, f in self.first_stage.items())

    def work_prefix(self, s: int) -> list[float]:
        """``p[k]``: stage ``s``'s work over layers [0, k) with each fused pair charged at the
        layer's own overlap ratio (additive; equals ``work`` for non-fused shapes)."""
        sh = self.shapes[s]
        return prefix_sums([(sh.f + rho * sh.fused_f) * lc.serial_f
                            + (sh.i + sh.b + rho * sh.fused_i) * lc.serial_i + sh.w * lc.w
                            + sh.b * (lc.serial_b - lc.serial_i) + sh.fused_w * max(0.0, lc.serial_b - lc.serial_i)
                            for lc, rho in zip(self._t[s].layers, self._t[s].rho)])

    def prefix_tables(self) -> dict[str, list[int]]:
        """Byte prefix sums over layers: static, act (per microbatch), act_w."""
        return {"static": [int(v) for v in self._static], "act": [int(v) for v in self._act],
                "act_w": [int(v) for v in self._act_w]}

    # --- memory -----------------------------------------------------------------------
    def static_bytes(self, a: int, b: int) -> int:
        """Parameters + gradients + optimizer state of [a, b)."""
        return int(self._static[b] - self._static[a])

    def work_bytes(self, a: int, b: int) -> int:
        """Largest transient bytes of one layer of [a, b) (``LayerCost.work_bytes``)."""
        return self._work(a, b)

    def layer_work_bytes(self) -> list[int]:
        """``LayerCost.work_bytes`` of each layer."""
        return [lc.work_bytes for lc in self._layers]

    def act_bytes(self, a: int, b: int) -> tuple[int, int]:
        """(activation bytes per microbatch, part kept until W) of [a, b)."""
        return int(self._act[b] - self._act[a]), int(self._act_w[b] - self._act_w[a])

    def stage_memory(self, s: int, a: int, b: int) -> int:
        """Peak bytes of stage ``s`` on [a, b) counting its own share only (exact for vpp = 1,
        a lower bound on its rank's peak otherwise)."""
        act, act_w = self.act_bytes(a, b)
        peak = max((held_bytes(full, w, act, act_w) for full, w in self._stage_points[s]), default=0)
        return self.static_bytes(a, b) + self.work_bytes(a, b) + peak

    def max_ends(self, limit: int | list[int]) -> list[list[int]]:
        """``ends[s][a]``: the largest b with ``stage_memory(s, a, b) <= limit`` (a when none);
        ``limit`` one for all stages or one per stage (mixed fleets).

        Memory grows with b (prefix sums of non-negative bytes), so the feasible ends of
        each (stage, start) form one interval; two pointers find them in O(S N).
        """
        n = self.num_layers
        out = []
        for s in range(self.num_stages):
            ends, b = [], 0
            cap = limit if isinstance(limit, int) else limit[s]
            for a in range(n):
                b = max(b, a)
                while b < n and self.stage_memory(s, a, b + 1) <= cap:
                    b += 1
                ends.append(b)
            out.append(ends + [n])
        return out

    def rank_memory(self, bounds: Bounds) -> dict[int, int]:
        """Peak bytes of each rank under the partition (the simulator's number)."""
        out = {}
        sizes = [self.act_bytes(a, b) for a, b in bounds]
        act, act_w = dict(enumerate(v[0] for v in sizes)), dict(enumerate(v[1] for v in sizes))
        for r, pts in self.points.items():
            mine = [bounds[s] for s, q in enumerate(self.ranks) if q == r]
            static = rank_static_bytes([self.static_bytes(a, b) for a, b in mine],
                                       [self.work_bytes(a, b) for a, b in mine])
            out[r] = static + peak_activation_bytes(pts, act, act_w)
        return out
