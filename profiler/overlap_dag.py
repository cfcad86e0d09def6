"""Analytical OV[a, b]: schedule one F and one backward sub-task DAG on two streams.

Each layer splits into the sub-tasks Megatron's EP-overlap splits it into
(Megatron-LM ``--overlap-moe-expert-parallel-comm``: megatron/core/models/common/
model_chunk_schedule_plan.py, megatron/core/pipeline_parallel/combined_1f1b.py):

    forward of a:   attn -> dispatch -> mlp -> combine         (shared expert beside dispatch)
    backward of b:  combine' -> mlp' -> dispatch' -> attn'      (input-gradient part only)

Compute sub-tasks run on one compute stream, communication on one communication
stream. Tasks start in Megatron's issue order (F.attn, B.combine, F.dispatch, B.mlp,
B.dispatch, F.mlp, F.combine, B.attn) as soon as their inputs are ready and their
stream is free. While communication is in flight, compute runs slower by
``contention`` (default 0.2: DeepEP reserves about 20 of 132 SMs, and a study over
A100/H100/MI250 measured 19% average slowdown of overlapped compute).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

__all__ = ["LayerTasks", "overlapped_time", "DEFAULT_CONTENTION"]

DEFAULT_CONTENTION = 0.2


@dataclass(frozen=True, kw_only=True)
class LayerTasks:
    """Sub-task durations of one layer's forward and input-gradient, seconds."""

    attn_f: float
    """Forward of everything before the experts (norm, mixer, router), compute."""
    shared_f: float = 0.0
    """Shared-expert forward, compute; independent of dispatch."""
    mlp_f: float = 0.0
    """Routed-experts (or dense MLP) forward, compute."""
    dispatch_f: float = 0.0
    """Forward dispatch all-to-all, communication."""
    combine_f: float = 0.0
    """Forward combine all-to-all, communication."""
    attn_b: float = 0.0
    """Input-gradient of the part before the experts, compute."""
    shared_b: float = 0.0
    """Shared-expert input-gradient, compute."""
    mlp_b: float = 0.0
    """Routed-experts (or dense MLP) input-gradient, compute."""
    dispatch_b: float = 0.0
    """Backward of dispatch (an all-to-all of gradients), communication."""
    combine_b: float = 0.0
    """Backward of combine, communication."""

    @property
    def forward(self) -> float:
        """Serial forward, communication exposed."""
        return self.attn_f + self.shared_f + self.mlp_f + self.dispatch_f + self.combine_f

    @property
    def backward(self) -> float:
        """Serial input-gradient, communication exposed."""
        return self.attn_b + self.shared_b + self.mlp_b + self.dispatch_b + self.combine_b


# (name, stream, duration attribute, inputs), listed in Megatron's issue order.
_F_TASKS = [("F.attn", "c", "attn_f", []), ("F.dispatch", "m", "dispatch_f", ["F.attn"]),
            ("F.shared", "c", "shared_f", ["F.attn"]), ("F.mlp", "c", "mlp_f", ["F.dispatch"]),
            ("F.combine", "m", "combine_f", ["F.mlp", "F.shared"])]
_B_TASKS = [("B.combine", "m", "combine_b", []), ("B.mlp", "c", "mlp_b", ["B.combine"]),
            ("B.shared", "c", "shared_b", []), ("B.dispatch", "m", "dispatch_b", ["B.mlp"]),
            ("B.attn", "c", "attn_b", ["B.dispatch", "B.shared"])]
_ISSUE_ORDER = ["F.attn", "B.combine", "F.dispatch", "B.mlp", "B.shared", "F.shared",
                "B.dispatch", "F.mlp", "F.combine", "B.attn"]


def _graph(fwd: LayerTasks, bwd: LayerTasks) -> nx.DiGraph:
    g = nx.DiGraph()
    for tasks, src in ((_F_TASKS, fwd), (_B_TASKS, bwd)):
        for name, stream, attr, inputs in tasks:
            g.add_node(name, stream=stream, work=getattr(src, attr))
            for i in inputs:
                g.add_edge(i, name)
    return g


def overlapped_time(fwd: LayerTasks, bwd: LayerTasks, *, contention: float = DEFAULT_CONTENTION) -> float:
    """Makespan of F(fwd) beside input-gradient(bwd) on a compute and a communication stream."""
    g = _graph(fwd, bwd)
    remaining = {n: g.nodes[n]["work"] for n in g}
    done: set[str] = set()
    running: dict[str, str | None] = {"c": None, "m": None}
    t = 0.0
    while len(done) < len(g):
        for stream in ("c", "m"):
            if running[stream] is None:
                running[stream] = next((n for n in _ISSUE_ORDER if n not in done
                                        and n not in running.values()
                                        and g.nodes[n]["stream"] == stream
                                        and all(p in done for p in g.predecessors(n))), None)
        comm_busy = running["m"] is not None and remaining[running["m"]] > 0
        rate = {"c": 1.0 / (1.0 + contention) if comm_busy else 1.0, "m": 1.0}
        steps = [remaining[n] / rate[s] for s, n in running.items() if n is not None]
        if not steps:  # nothing runnable: cannot happen in an acyclic graph
            raise RuntimeError("overlap DAG stalled")
        dt = min(steps)
        t += dt
        for s, n in running.items():
            if n is not None:
                remaining[n] -= dt * rate[s]
                if remaining[n] <= 1e-15:
                    done.add(n)
                    running[s] = None
    return t
