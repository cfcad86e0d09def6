"""The one prediction of a training step: step time, peak memory, MFU, exposed DP and Adam time.

Every figure ppplan reports for a configuration comes from ``predict``: ``ppplan plan``
(``planner.planning.dp_step.add_dp_step`` writes it into the plan), the degree search's
closed-form screen (``planner.planning.estimate``), ``replan`` and the published-runs
benchmark (``benchmarks/published.py``, which plans each row through ``planner.api.plan``).
What differs between callers is only where the pipeline schedule's makespan and the
per-rank peaks come from: the simulated schedule (a plan) or the closed-form bubble formula
(the screen).

[Note: one step] The optimizer step a framework logs (and a published tokens/s figure
measures) is the pipeline schedule plus the data-parallel traffic it does not hide plus the
Adam step (``profiler.cost_model.optimizer``). MFU divides the model FLOPs of the whole
global batch (PaLM convention: ``planner.core.layer_math.model_flops_per_token``;
recomputation is not model FLOPs) by that whole step x GPUs x the GPU's dense BF16 peak
(PaLM, Chowdhery et al. 2022, appendix B), so a predicted MFU is comparable with the one a
framework logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.core.cluster import ClusterSpec
from planner.core.layer_math import layer_params, model_flops_per_token
from planner.core.model import ModelSpec
from profiler.cost_model.optimizer import DpCost, dp_step_cost

__all__ = ["Prediction", "predict_optimizer_step", "dp_cost"]


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """Predicted figures of one configuration's optimizer step ([Note: one step])."""

    step_time_s: float
    """Pipeline schedule: first forward to last backward of one step, seconds."""
    dp_exposed_s: float
    """Data-parallel gradient/parameter traffic not hidden behind compute, seconds."""
    optimizer_s: float
    """Adam step, seconds."""
    optimizer_step_time_s: float
    """``step_time_s + dp_exposed_s + optimizer_s``: the whole optimizer step."""
    mfu: float
    """Model FLOPs of the global batch / (optimizer step x GPUs x dense BF16 peak)."""
    peak_memory_bytes: tuple[int, ...]
    """Peak memory of each pipeline rank, bytes."""
    tokens_per_s_per_gpu: float
    """Global batch tokens / optimizer step / GPUs."""

    def as_fields(self) -> dict:
        """The fields a plan's ``predicted`` section records."""
        return {"step_time_s": self.step_time_s, "dp_exposed_s": self.dp_exposed_s,
                "optimizer_s": self.optimizer_s, "optimizer_step_time_s": self.optimizer_step_time_s,
                "mfu": self.mfu, "peak_memory_bytes": list(self.peak_memory_bytes),
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu}


def predict_optimizer_step(model: ModelSpec, cluster: ClusterSpec, *, step_time_s: float,
                           peak_memory_bytes: Sequence[int], microbatch_compute_s: float,
                           microbatches: int, link_busy_s: float = 0.0) -> Prediction:
    """The prediction of a step whose pipeline schedule takes ``step_time_s`` with these
    per-rank peaks; ``microbatch_compute_s`` (the busiest rank's compute of one microbatch)
    is what the data-parallel traffic hides behind, ``microbatches`` per replica per step;
    ``link_busy_s``: the inter-site link's busy time when pp crosses sites, a floor under the
    schedule (``planner.planning.dp_step.site_link_busy``)."""
    dp = dp_cost(model, cluster, microbatch_compute_s=microbatch_compute_s, microbatches=microbatches)
    step = max(step_time_s, link_busy_s) + dp.exposed_s + dp.optimizer_s
    tr = cluster.training
    tokens = tr.global_batch * tr.seq_len
    flops = tokens * model_flops_per_token(model, tr.seq_len)
    mfu = flops / (step * cluster.num_gpus * cluster.mean_peak_flops) if step > 0 else 0.0
    return Prediction(step_time_s=step_time_s, dp_exposed_s=dp.exposed_s, optimizer_s=dp.optimizer_s,
                      optimizer_step_time_s=step, mfu=mfu,
                      peak_memory_bytes=tuple(int(b) for b in peak_memory_bytes),
                      tokens_per_s_per_gpu=tokens / step / cluster.num_gpus if step > 0 else 0.0)


def dp_cost(model: ModelSpec, cluster: ClusterSpec, *, microbatch_compute_s: float,
            microbatches: int) -> DpCost:
    """Data-parallel traffic and Adam step of the average pipeline rank (its share of the
    model's parameters after tp, pp and ep x etp) behind ``microbatch_compute_s``."""
    par = cluster.parallel
    params = [layer_params(layer, model) for layer in model.layers]
    return dp_step_cost(cluster, dense_params=sum(p.dense for p in params) / (par.tp * par.pp),
                        expert_params=sum(p.expert for p in params) / (par.ep * par.etp * par.pp),
                        microbatch_compute_s=microbatch_compute_s, microbatches=microbatches,
                        layers=len(model.layers) // par.pp)
