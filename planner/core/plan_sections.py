"""The plan's ``model`` and ``cluster`` sections, written from the specs a plan is made for.

``ppplan plan`` (``planner.planning.front_door``) and ``ppplan replan``
(``planner.replanning.inputs``) both record them with these two functions, so a re-plan's
sections read as the first plan's.
"""

from __future__ import annotations

from dataclasses import asdict

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable
from planner.core.model import ModelSpec
from planner.core.plan_parts import ModelInfo
from planner.core.plan_records import ClusterInfo

__all__ = ["model_section", "cluster_section", "UNSET_WHEN_DEFAULT"]


def model_section(model: ModelSpec, table: CostTable | None = None) -> ModelInfo:
    """The plan's ``model`` part."""
    return ModelInfo(name=model.name, num_layers=model.num_layers, layout=model.layout,
                     layer_types=tuple(lc.type for lc in table.layers) if table else tuple(model.type_keys()))


def cluster_section(spec: ClusterSpec) -> ClusterInfo:
    """The plan's ``cluster`` section."""
    training = {k: v for k, v in asdict(spec.training).items()
                if k not in UNSET_WHEN_DEFAULT or v != UNSET_WHEN_DEFAULT[k]}
    gpu = {k: v for k, v in asdict(spec.gpu).items()
           if k != "host_bandwidth" or spec.training.offload != UNSET_WHEN_DEFAULT["offload"]}
    return ClusterInfo.from_dict({"gpu": gpu, "num_gpus": spec.num_gpus,
                                  "gpus_per_node": spec.gpus_per_node, "training": training,
                                  "network": asdict(spec.network),
                                  **({"devices": [{"type": g.name, "count": g.count, "gpus_per_node": g.gpus_per_node,
                                                   "peak_flops": g.gpu.peak_flops}
                                                  for g in spec.devices]} if spec.devices else {})})


UNSET_WHEN_DEFAULT = {"moe_expert_capacity_factor": None, "moe_pad_expert_input_to_capacity": False,
                      "offload": "none", "cuda_graph_scope": "auto", "cp_comm_type": "auto",
                      "param_dtype": "fp32", "fsdp_experts": "shard", "grad_reduce_in_fp32": True}
"""Training fields a plan records only when set (MoE capacity mode, activation offloading, a
CUDA-graph scope, a context-parallel implementation, BF16 parameters or gradients, AutoModel's
expert sharding), so plans that leave them out read as before (the GPU's host link is recorded
only with offloading too)."""
