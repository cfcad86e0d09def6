"""A Megatron-LM launcher that plans first, then builds its argument list from the plan.

    python examples/megatron_launcher.py                    # print the torchrun command
    python examples/megatron_launcher.py --model qwen3-next-80b-a3b --json

The plan is made with ``target="megatron"`` (only what Megatron executes is searched), so
it fixes the pipeline layout (``--pipeline-model-parallel-layout``), microbatch sizes,
recomputation and the companion flags Megatron's checks need; the launcher adds what is
the job's own (paths, node topology). A ``--schedule`` Megatron does not run is refused
with the reason and nothing is launched.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys


def build_command(*, model: str, nodes: int, gpus_per_node: int, data_path: str,
                  **plan_options: object) -> list[str]:
    """torchrun + pretrain_gpt.py argument list for ``model``, planned by ppplan."""
    from planner import plan

    p = plan(model, target="megatron", **plan_options)
    return ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={gpus_per_node}",
            "pretrain_gpt.py", *p.megatron_args(), "--data-path", data_path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--pp", type=int)
    parser.add_argument("--vpp", type=int)
    parser.add_argument("--schedule", default="auto", help="a family Megatron runs (1f1b, interleaved, "
                        "interleaved-overlap) or auto: the fastest of them")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--data-path", default="/data/my-corpus_text_document")
    parser.add_argument("--json", action="store_true", help="print the argument list as JSON")
    opts = parser.parse_args(argv)
    try:
        cmd = build_command(model=opts.model, nodes=opts.nodes, gpus_per_node=opts.gpus_per_node,
                            data_path=opts.data_path, pp=opts.pp, vpp=opts.vpp,
                            schedule=opts.schedule,
                            work=5.0)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(cmd) if opts.json else shlex.join(cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
