"""Fitting the cost model's constants to published rows, and the statistics of the check.

The fit minimises the L1 loss sum |ln(pred / meas)| over the rows it is given. Each
prediction is a full plan through the user's path (``planner.api.plan``), seconds per row,
so the fit works on a linear surrogate: per row, ``ln pred`` as a linear function of
``ln c`` for each fitted constant c, its slopes measured by planning the row once more with
each constant moved by ``STEP`` (``slopes``). The L1 fit on the surrogate is a linear
programme (GLOP), inside the constants' physical ranges (``fitted.BOUNDS``). A row's
reported figure is never the surrogate's: the benchmark plans every held-out row again with
the constants its fold fitted.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ortools.linear_solver import pywraplp

from profiler.cost_model.fitted import BOUNDS, FittedConstants

__all__ = ["FIT_NAMES", "STEP", "moved", "fit_l1", "spearman", "median"]

FIT_NAMES = tuple(BOUNDS)
"""The fitted constants (``gemm_dim_half`` is measured: ``fitted.GEMM_DIM_HALF``)."""
STEP = math.log(1.15)
"""Each constant is moved by 15% (in ln) to measure the slopes: large enough that the
planner's discrete choices (schedule, recomputation) do not make them noise, small enough
to stay local."""
RIDGE = 1e-3
"""L1 pull of each constant toward the linearisation point: a constant no training row
depends on (the MoE ones when a fold holds no MoE row) stays where it was."""


def moved(cal: FittedConstants, name: str, step: float = STEP) -> FittedConstants:
    """``cal`` with ``name`` multiplied by e^step."""
    return replace(cal, **{name: getattr(cal, name) * math.exp(step)})


def fit_l1(base: FittedConstants, ln0: dict[str, float], slope: dict[str, dict[str, float]],
           rows: list[str]) -> FittedConstants:
    """Constants minimising sum over ``rows`` of |ln0[r] + sum_c slope[r][c] x_c| (+ RIDGE
    sum |x_c|), x_c = ln(c / base.c), each c inside its ``BOUNDS``."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    x = {}
    for name in FIT_NAMES:
        lo, hi = BOUNDS[name]
        at = getattr(base, name)
        x[name] = solver.NumVar(math.log(lo / at), math.log(hi / at), name)
    obj = solver.Objective()
    for r in rows:
        e = solver.NumVar(0.0, solver.infinity(), f"e_{r}")
        lin = [(x[n], slope[r][n]) for n in FIT_NAMES]
        for sign in (1.0, -1.0):  # e >= +-(ln0 + sum slope x)
            ct = solver.Constraint(sign * ln0[r], solver.infinity())
            ct.SetCoefficient(e, 1.0)
            for var, s in lin:
                ct.SetCoefficient(var, -sign * s)
        obj.SetCoefficient(e, 1.0)
    for name in FIT_NAMES:
        a = solver.NumVar(0.0, solver.infinity(), f"a_{name}")
        for sign in (1.0, -1.0):
            ct = solver.Constraint(0.0, solver.infinity())
            ct.SetCoefficient(a, 1.0)
            ct.SetCoefficient(x[name], -sign)
        obj.SetCoefficient(a, RIDGE * max(len(rows), 1))
    obj.SetMinimization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("the L1 fit's linear programme has no optimal solution")
    return replace(base, **{n: getattr(base, n) * math.exp(x[n].solution_value()) for n in FIT_NAMES})


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None under 2 points or no spread."""
    if len(a) < 2:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den else None


def median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
