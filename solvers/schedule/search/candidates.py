"""Heuristic schedule candidates for given stage costs, simulated, with a memo.

``best_schedule`` (``solvers.schedule.search.search``) ranks these:

- ``from_start``: a start order as given and with W tasks moved into its gaps;
- ``drawn``: every applicable family's order (``solvers.schedule.families.registry``), as drawn and
  W-filled (``solvers.schedule.engines.w_fill``), and the greedy list scheduler (``solvers.schedule.engines.list_scheduler``)
  under the memory budget and under p and 2p microbatches, fused and not;
- ``simulated``: ``drawn``'s candidates with ``limits``'s verdict each, memoised
  ([Note: heuristic memo]).
"""

from __future__ import annotations

from collections import OrderedDict
from weakref import WeakKeyDictionary

from planner.core.errors import InfeasibleError
from planner.core.meter import WorkMeter
from planner.core.schedule import Key, Schedule, provides
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from planner.core.units import format_bytes
from planner.core.validate import validate
from solvers.schedule.search.budget import Deadline
from solvers.schedule.search.deadlines import earliest_finish
from solvers.schedule.engines.list_scheduler import list_schedule
from solvers.schedule.engines.memory_limit import rank_activation
from solvers.schedule.families.registry import EXACT_FAMILIES, SCHEDULES, applies, fuses, placement_of
from solvers.schedule.engines.w_fill import fill_w
from solvers.schedule.engines.zb_greedy import zb_greedy_orders

__all__ = ["DRAW_FIRST", "FirstValid", "from_start", "drawn", "limits", "verdict", "simulated", "clear_memo"]


DRAW_FIRST = ("zb-h1", "zb-h2", "zbv", "dualpipev", "dualpipev-list", "1f1b-overlap", "interleaved-overlap")
"""Families drawn before the others (then ``SCHEDULES`` order): ZB-H1 first, which holds
no more than p microbatches in flight (1F1B's memory), so it fits wherever any order can;
then ZB-H2 (up to 2p in flight), the V and the fused orders, which win most often. A draw
cut short by the wall cap ([Note: kept budget] in ``solvers.schedule.search.budget``) has them
([Note: first valid]); with time for every draw the order only breaks exact ties."""


def from_start(costs: StageCosts, act_limit: list[int] | None, deadlines: dict[Key, float],
               families: list[str], start: tuple[str, Schedule] | None, greedy: bool):
    """The start as given and, unless only exact families are asked for, W-filled."""
    exact = not greedy and all(n in EXACT_FAMILIES for n in families)
    if start is not None:
        yield start
        if not exact:
            yield f"{start[0]}+w-fill", fill_w(start[1], costs, activation_limit=act_limit, deadlines=deadlines)


FAMILY_DRAW_UNITS = 1.0
GREEDY_DRAW_UNITS = 3.0
W_FILL_UNITS = 2.0
"""Evaluations' worth of wall time (``WallBudget.unit_s``) one greedy list schedule, and one
W-fill of a family order, need to be drawn: on DeepSeek-V3 pp 32 vpp 2 M 1024 (133,120
actions) ``list_schedule`` took 3.1-3.7 s and ``fill_w`` 2.1-2.9 s, against 0.93 s for a
simulation and 0.4 s for a validation (one evaluation is both). A draw cannot be cut
halfway, so it starts only when the wall affords it (a fill started 0.2 s before the
polish deadline had made that plan 14.1-16.1 s against its 14 s limit)."""


def drawn(costs: StageCosts, m: int, act_limit: list[int] | None, deadlines: dict[Key, float],
          families: list[str], greedy: bool, *, wall: Deadline | None = None, cut: list[str] | None = None):
    """The family orders (as drawn and W-filled) and the greedy list schedules for ``costs``:
    every candidate that does not depend on a start, as ``(position, name, schedule or
    reason)``.

    [Note: draw order] The two streams are drawn in turns, so that a draw cut short by the
    wall budget ([Note: kept budget] in ``solvers.schedule.search.budget``) holds the first of
    both: on V placement the family orders are far from the greedy fused list schedule
    (DeepSeek-V3 pp 16 vpp 2, M 120, 72 GiB: zbv 85.6 s, dualpipev 67.6 s, greedy-fused
    41.9 s), which came ninth, after 1.2 s of drawing, so ``--time-limit 3`` planned
    dualpipev. ``position`` (family orders first, then the greedy ones, each stream in
    its own order) is what ties are broken by once the draw is complete, so a complete
    draw chooses exactly as a draw of one stream after the other. A greedy run or a W-fill
    starts only when ``wall`` affords ``GREEDY_DRAW_UNITS`` or ``W_FILL_UNITS``; when it does
    not, it is skipped, its label goes to ``cut`` and the draw is incomplete (not memoised)."""
    streams = [enumerate(_family_orders(costs, m, act_limit, deadlines, families, greedy, wall, cut))]
    if greedy:
        streams.append(iter(_greedy_schedules(costs, m, act_limit, deadlines, wall, cut)))
        streams.append(enumerate(zb_greedy_orders(costs, m, act_limit)))  # Zero Bubble's own heuristic, re-derived
    live = list(range(len(streams)))
    while live:
        for k in list(live):
            item = next(streams[k], None)
            if item is None:
                live.remove(k)
                continue
            j, (name, sched) = item
            yield (k, j), name, sched


def _family_orders(costs: StageCosts, m: int, act_limit: list[int] | None, deadlines: dict[Key, float],
                   families: list[str], greedy: bool, wall: Deadline | None = None, cut: list[str] | None = None):
    """Each applicable family's order, as drawn and W-filled (eager, then fit); a W-fill
    starts only when ``wall`` affords ``W_FILL_UNITS`` (else it is skipped, noted in ``cut``)."""
    pp, vpp = costs.num_ranks, costs.num_stages // costs.num_ranks
    place, fuse = placement_of(costs), fuses(costs)
    exact = not greedy and all(n in EXACT_FAMILIES for n in families)
    for name in sorted(families, key=lambda n: DRAW_FIRST.index(n) if n in DRAW_FIRST else len(DRAW_FIRST)):
        kind = SCHEDULES[name]
        if not applies(kind, vpp, place) or (kind.fused and not fuse):
            continue
        if not _affords(wall, FAMILY_DRAW_UNITS, name, cut):
            break  # generating an order costs like a re-timing of it (3.8 s for zb-h1 at pp 32, M 960)
        try:
            order = kind.make(pp, vpp, m)
        except InfeasibleError as exc:
            yield name, str(exc)
            continue
        yield name, order
        if exact:
            continue
        for mode in ("eager", "fit"):
            label = f"{name}+w-fill" + ("" if mode == "eager" else "-fit")
            if not _affords(wall, W_FILL_UNITS, label, cut):
                break  # no time for fills; the next family's plain order may still fit
            yield label, fill_w(order, costs, activation_limit=act_limit, deadlines=deadlines, w_mode=mode)


def _greedy_schedules(costs: StageCosts, m: int, act_limit: list[int] | None, deadlines: dict[Key, float],
                      wall: Deadline | None = None, cut: list[str] | None = None):
    """The greedy list scheduler under the memory budget, then capped at p and 2p
    microbatches of activations, eager W before fit, as ``(position, (name, schedule or
    reason))``. Fused runs (when the costs fuse) are drawn before plain ones, positioned
    after them ([Note: draw order]: fused wins where overlap pays, plain breaks ties)."""
    pp, fuse = costs.num_ranks, fuses(costs)
    act = rank_activation(costs)
    seen: list[list[int] | None] = []
    j = 0
    for cap in (None, pp, 2 * pp):
        if cap is None and act_limit is None:
            continue
        b = act_limit if cap is None else [min(x, cap * a) for x, a in zip(act_limit or [cap * a for a in act], act)]
        if b in seen:  # the cap is above the memory budget on every rank: same runs again
            continue
        seen.append(b)
        kinds = (True, False) if fuse else (False,)
        for f in kinds:
            for k, mode in enumerate(("eager", "fit")):
                label = "greedy" + ("-fused" if f else "") + ("" if cap is None else f"@{cap // pp}p") + \
                    ("" if mode == "eager" else "-fit")
                if not _affords(wall, GREEDY_DRAW_UNITS, label, cut):
                    return
                res = list_schedule(costs, m, activation_limit=b, fuse=f, deadlines=deadlines, w_mode=mode)
                yield j + 2 * (f and fuse) + k, (label, res.schedule if res.schedule is not None else res.reason)
        j += 2 * len(kinds)


def _affords(wall: Deadline | None, units: float, label: str, cut: list[str] | None) -> bool:
    """Whether ``wall`` leaves time for a draw of ``units`` evaluations; notes ``label`` in
    ``cut`` when it does not."""
    if wall is None or wall.affords(units):
        return True
    if cut is not None:
        cut.append(label)
    return False


def limits(schedule: Schedule, costs: StageCosts, act_limit: list[int] | None,
           deadlines: dict[Key, float], meter: WorkMeter | None = None) -> tuple[float | None, str]:
    """Simulated step time if the schedule meets the deadlines and the per-rank budget,
    else None and why; one that cannot be simulated (a deadlock, a missing task) is
    sent to the validator for its reason. Timed actions are charged to ``meter``."""
    try:
        sim = simulate(schedule, costs, meter=meter)
    except ValueError:  # a deadlock or a missing unit of work (compile_schedule)
        m = 1 + max((p.microbatch for row in schedule.values() for a in row for p in a.parts), default=-1)
        found = validate(schedule, costs, num_microbatches=m, meter=meter)
        return None, str(found[0]) if found else "cannot be simulated"
    if deadlines:
        ends = {k: sim.end[n] for n, a in enumerate(sim.actions) for k in provides(a)}
        for key in sorted(k for k in deadlines if ends[k] > deadlines[k] + 1e-12):
            return None, (f"task {key[0]}{key[1]}{key[2]} ends at {ends[key]:.6g} s, after its deadline "
                          f"{deadlines[key]:.6g} s; its earliest possible finish is "
                          f"{earliest_finish(costs, key):.6g} s")
    if act_limit is not None:
        for r, (peak, b) in enumerate(zip(sim.peak_act_bytes, act_limit)):
            if peak > b:
                return None, f"rank {r} holds {format_bytes(peak)} of activations, budget {format_bytes(b)}"
    return sim.step_time, "valid"


def verdict(sched: Schedule | str | None, costs: StageCosts, act_limit: list[int] | None,
            deadlines: dict[Key, float], meter: WorkMeter | None = None) -> tuple[float | None, str]:
    """``limits`` of a drawn candidate; one that could not be drawn carries its reason."""
    if isinstance(sched, dict):
        return limits(sched, costs, act_limit, deadlines, meter)
    return None, sched or "does not fit the memory budget"


_MEMO_SIZE = 16
_memo: OrderedDict[tuple, list[tuple[str, Schedule | str, float | None, str]]] = OrderedDict()
"""[Note: heuristic memo] The start-independent candidates of recent ``best_schedule``
calls, simulated: the joint search schedules the same partition several times (each
finalist's rounds, its polish, the unchanged baseline copies), and the candidates depend
only on the stage costs, the count, the budget, the deadlines and the families asked
for, so they are drawn once. A pure cache: results are the same with or without it.
The planner empties it after each plan (``clear_memo``): it holds hundreds of thousands
of actions, which would slow every later garbage collection of a long-lived process.
This one serves calls without a work meter; each plan's meter has its own
(``_plan_memos``): a memo hit times nothing, so a plan served, evicted or cleared by
another plan in the same process (twice ``planner.api.plan``, or threads) would count
other actions ([Note: timed actions] in ``planner.core.meter``) and could stop elsewhere."""

_plan_memos: WeakKeyDictionary[WorkMeter, OrderedDict] = WeakKeyDictionary()
"""Each plan's memo ([Note: heuristic memo]), under the plan's work meter."""


def _memo_of(meter: WorkMeter | None) -> OrderedDict:
    """The memo that serves ``meter``'s plan ([Note: heuristic memo])."""
    return _memo if meter is None else _plan_memos.setdefault(meter, OrderedDict())


def clear_memo(meter: WorkMeter | None = None) -> None:
    """Drop the memo of ``meter``'s plan, or every memo without one ([Note: heuristic memo])."""
    if meter is not None:
        _plan_memos.pop(meter, None)
        return
    _memo.clear()
    _plan_memos.clear()


def _memo_key(costs: StageCosts, m: int, act_limit, deadlines, families: list[str], greedy: bool) -> tuple:
    return (costs.f, costs.i, costs.w, costs.b, costs.act_bytes, costs.act_w_bytes, costs.static_bytes, costs.out_bytes,
            costs.ranks, tuple(sorted(costs.fused.items())), costs.p2p, m,
            None if act_limit is None else tuple(act_limit), tuple(sorted(deadlines.items())), tuple(families), greedy)


class FirstValid:
    """[Note: first valid] A wall deadline that binds only once a valid candidate is in hand.

    A draw cut by the wall cap before any candidate met the memory budget and deadlines
    would read as "no schedule meets the limits" although one exists (ZB-H2 over memory
    on p 32, the cap passed before ZB-H1 was drawn). So until one candidate is valid the
    draw goes on (and its uncuttable draws start) whatever the clock says; a cap can
    shorten the search for a better schedule, never the search for the first one.
    """

    def __init__(self, wall: Deadline, found: bool = False) -> None:
        self.wall = wall
        self.found = found
        """Whether a valid candidate is in hand (then ``wall`` binds)."""

    def expired(self) -> bool:
        return self.found and self.wall.expired()

    def affords(self, units: float) -> bool:
        return not self.found or self.wall.affords(units)


def simulated(costs: StageCosts, m: int, act_limit, deadlines, families: list[str], greedy: bool,
              wall: Deadline | None = None, *, have_valid: bool = False, meter: WorkMeter | None = None):
    """``drawn``'s candidates with ``limits``'s verdict each, from the memo when there.
    Drawing stops at ``wall``'s deadline ([Note: kept budget]) once a valid candidate is in
    hand (``have_valid``: the caller holds one already; [Note: first valid]); a cut list is
    not memoised. Timed actions are charged to ``meter`` (a memo hit times none)."""
    key = _memo_key(costs, m, act_limit, deadlines, families, greedy)
    memo = _memo_of(meter)
    hit = memo.get(key)
    if hit is None:
        wall = None if wall is None else FirstValid(wall, have_valid)
        got, complete, unaffordable = [], True, []
        candidates = drawn(costs, m, act_limit, deadlines, families, greedy, wall=wall, cut=unaffordable)
        while complete:
            if wall is not None and wall.expired():  # checked before drawing the next one
                complete = False
                break
            item = next(candidates, None)
            if item is None:
                break
            pos, name, sched = item
            got.append((pos, (name, sched, *verdict(sched, costs, act_limit, deadlines, meter))))
            if wall is not None and got[-1][1][2] is not None:
                wall.found = True
        if not complete or unaffordable:
            return [c for _, c in got]
        hit = [c for _, c in sorted(got, key=lambda g: g[0])]  # [Note: draw order]
        memo[key] = hit
        while len(memo) > _MEMO_SIZE:
            memo.popitem(last=False)
    else:
        memo.move_to_end(key)
    return hit
