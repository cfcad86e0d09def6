"""Oobleck's instantiation rule with ppplan's costs: its plans for n nodes, scored by ppplan.

Oobleck (SOSP'23, SymbioticLab/Oobleck ``oobleck/planning/instantiator.py`` at 3b7a0c2) covers
all n nodes with pipelines of different sizes (templates of k nodes,
``_enumerate_instantiation_options``, line 224), splits the global batch's microbatches among
them (``_distribute_batch``, line 254) and steps in the slowest pipeline's time plus the
all-reduce across pipelines (``HeterogeneousPipelinesExecutionPlan.iteration_time``, line 54).
Here each template is a pipeline ppplan plans (pp k, dp 1: partition and schedule by ppplan, its
optimizer step from ppplan's simulator, recomputation ``auto`` as the re-plans), fitted as a + b x microbatches from two plans; the
microbatches are split so every pipeline ends together (the continuous optimum of Oobleck's
split); the all-reduce across pipelines is left out, so the figure is an upper bound on
Oobleck's throughput under ppplan's cost model. The C++ template planner is not run.
"""

from __future__ import annotations

from dataclasses import replace

from planner.api import plan as make_plan
from planner.core.cluster import ClusterSpec
from planner.core.errors import InfeasibleError, InputError
from planner.planning.dp_step import optimizer_step_time

__all__ = ["template_costs", "instantiate"]


def template_costs(model: str, cluster: ClusterSpec, sizes: range, *, work: float) -> dict[int, tuple[float, float]]:
    """k -> (a, b): a k-stage pipeline's optimizer step is a + b x microbatches (ppplan's plans
    at 4k and 8k microbatches of one sample); sizes that fit no memory are left out."""
    costs = {}
    for k in sizes:
        steps = []
        for nb in (4 * k, 8 * k):
            try:
                p = make_plan(model, cluster=replace(cluster, num_gpus=k), pp=k, dp=1, tp=1, global_batch=nb, recompute="auto",
                              work=work)
            except (InfeasibleError, InputError):  # a k-GPU pipeline does not fit memory
                break
            steps.append((nb, optimizer_step_time(p)))
        if len(steps) == 2:
            (n1, s1), (n2, s2) = steps
            b = (s2 - s1) / (n2 - n1)
            costs[k] = (s1 - b * n1, b)
    return costs


def _combos(n: int, sizes: list[int]):
    """Every multiset of ``sizes`` summing to ``n`` (as Oobleck's enumeration), as {k: count}."""
    if n == 0:
        yield {}
        return
    for i, k in enumerate(sizes):
        if k <= n:
            for rest in _combos(n - k, sizes[i:]):
                yield {**rest, k: rest.get(k, 0) + 1}


def instantiate(n: int, costs: dict[int, tuple[float, float]], batch: int) -> tuple[float, dict[int, int]] | None:
    """The fastest cover of ``n`` nodes: (step seconds, {template size: pipelines}); every
    pipeline gets (T - a) / b microbatches with sum ``batch``, at least one each."""
    best = None
    for combo in _combos(n, sorted(costs, reverse=True)):
        rate = sum(x / costs[k][1] for k, x in combo.items())
        t = (batch + sum(x * costs[k][0] / costs[k][1] for k, x in combo.items())) / rate
        if all((t - costs[k][0]) / costs[k][1] >= 1 for k in combo) and (best is None or t < best[0]):
            best = (t, combo)
    return best
