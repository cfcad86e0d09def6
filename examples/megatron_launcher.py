"""A Megatron-LM launcher that plans first, then builds its argument list from the plan.

    python examples/megatron_launcher.py                    # print the torchrun command
    python examples/megatron_launcher.py --model qwen3-next-80b-a3b --nodes 4 --json

The plan is made with ``target="megatron"`` (only what Megatron executes is searched) for
the GPUs the command launches, ``--nodes`` x ``--gpus-per-node``: the model's shipped
cluster with that many GPUs, its data-parallel size following (or, with ``--search-degrees``,
every degree chosen for them). Megatron infers the data-parallel size from the world size
and the microbatch count from the global batch (``megatron/core/parallel_state.py``
``initialize_model_parallel``, ``megatron/core/num_microbatches_calculator.py``), so the plan
fixes the sizes it divides by, the global batch, the micro-batch size, the pipeline layout
(``--pipeline-model-parallel-layout``), recomputation and the companion flags Megatron's
checks need; the launcher adds what is the job's own (paths, node topology). A GPU count
the batch cannot split over, or a ``--schedule`` Megatron does not run, is refused with the
reason on one line and nothing is launched.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

__all__ = ["launch_plan", "command"]


def launch_plan(*, model: str, nodes: int, gpus_per_node: int, search_degrees: bool = False,
                **plan_options: object):
    """The plan for ``nodes x gpus_per_node`` GPUs: the model's shipped cluster resized to them
    (dp = GPUs / (pp x tp x cp)), or with ``search_degrees`` every degree searched for them."""
    from planner import plan
    from planner.api import resolve_cluster
    from planner.core.errors import InputError
    from planner.core.hf_config import load_model

    gpus = nodes * gpus_per_node
    if search_degrees:
        return plan(model, target="megatron", gpus=gpus, **plan_options)
    base = resolve_cluster(load_model(model), None, target="megatron")
    par = base.parallel
    pp = plan_options.get("pp") or par.pp
    if gpus % (pp * par.tp * par.cp):
        raise InputError("--nodes", f"{nodes} x {gpus_per_node} = {gpus} GPUs do not split into pp {pp} x "
                         f"tp {par.tp} x cp {par.cp}", "pick a node count that does, or pass --pp")
    dp = gpus // (pp * par.tp * par.cp)
    sized = replace(base, num_gpus=gpus, gpus_per_node=gpus_per_node).with_parallel(pp=pp, dp=dp)
    try:
        sized.check()
    except InputError as exc:  # the batch or expert-parallel size does not divide: say it for these GPUs
        raise InputError("--nodes", f"{nodes} x {gpus_per_node} = {gpus} GPUs give dp {dp}, and then "
                         f"{exc.field}: {exc.problem}", "pick another node count or --pp") from None
    return plan(model, cluster=sized, target="megatron", **plan_options)


def command(plan, *, nodes: int, gpus_per_node: int, data_path: str) -> list[str]:
    """torchrun + pretrain_gpt.py argument list launching ``plan`` on its GPUs."""
    if plan.cluster.num_gpus != nodes * gpus_per_node:
        raise ValueError(f"the plan is for {plan.cluster.num_gpus} GPUs, the command would launch "
                         f"{nodes} x {gpus_per_node} = {nodes * gpus_per_node}")
    return ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={gpus_per_node}",
            "pretrain_gpt.py", *plan.megatron_args(), "--data-path", data_path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--pp", type=int)
    parser.add_argument("--vpp", type=int)
    parser.add_argument("--schedule", default="auto", help="a family Megatron runs (1f1b, interleaved, "
                        "interleaved-overlap) or auto: the fastest of them")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--search-degrees", action="store_true",
                        help="choose tp, pp, vpp, ep, cp, dp and micro-batch size for the launched GPUs")
    parser.add_argument("--data-path", default="/data/my-corpus_text_document")
    parser.add_argument("--plan-out", help="also write the plan launched to this JSON file")
    parser.add_argument("--json", action="store_true", help="print the argument list as JSON")
    opts = parser.parse_args(argv)
    try:
        p = launch_plan(model=opts.model, nodes=opts.nodes, gpus_per_node=opts.gpus_per_node,
                        search_degrees=opts.search_degrees, pp=opts.pp, vpp=opts.vpp, schedule=opts.schedule,
                        work=5.0)
        cmd = command(p, nodes=opts.nodes, gpus_per_node=opts.gpus_per_node, data_path=opts.data_path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if opts.plan_out:
        Path(opts.plan_out).write_text(p.to_json())
    print(json.dumps(cmd) if opts.json else shlex.join(cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
