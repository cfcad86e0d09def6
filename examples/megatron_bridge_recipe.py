"""Plan for Megatron, then apply the plan to a Megatron-Bridge recipe's ``ConfigContainer``.

    python examples/megatron_bridge_recipe.py --model qwen3-30b-a3b --vpp 2 --json
    python examples/megatron_bridge_recipe.py --model qwen3-30b-a3b --vpp 2 \\
        --recipe megatron.bridge.recipes.qwen.qwen3_moe:qwen3_30b_a3b_pretrain_config

Without ``--recipe`` it prints the fields the plan sets per config section (model, train,
optimizer, ddp, comm_overlap). With it (on a machine where Megatron-Bridge imports: it needs
transformer-engine, a CUDA build) it builds the recipe's config, applies the plan
(``planner.export.megatron_bridge.apply_plan_to_bridge``) and prints the result's pipeline
fields; the config is then what ``megatron.bridge.training.pretrain.pretrain(config, ...)`` takes.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-30b-a3b")
    parser.add_argument("--pp", type=int)
    parser.add_argument("--vpp", type=int)
    parser.add_argument("--work", type=float, default=5.0, help="ppplan plan --work")
    parser.add_argument("--recipe", help="MODULE:FUNCTION returning a ConfigContainer")
    parser.add_argument("--json", action="store_true", help="print the settings as JSON")
    args = parser.parse_args(argv)

    from planner import plan
    from planner.export.megatron_bridge import apply_plan_to_bridge, bridge_settings

    p = plan(args.model, pp=args.pp, vpp=args.vpp, target="megatron", work=args.work)
    if args.recipe is None:
        settings = bridge_settings(p)
        lines = ["\n".join(f"cfg.{section}.{k} = {v!r}" for k, v in values.items()) if isinstance(values, dict)
                 else f"cfg.{section} = {values!r}" for section, values in settings.items()]
        text = json.dumps(settings, indent=1) if args.json else "\n".join(lines)
        sys.stdout.write(text + "\n")
        return 0
    module, _, function = args.recipe.partition(":")
    config = apply_plan_to_bridge(p, getattr(importlib.import_module(module), function)())
    m = config.model
    sys.stdout.write(f"pp {m.pipeline_model_parallel_size} vpp {m.virtual_pipeline_model_parallel_size} "
                     f"layout {m.pipeline_model_parallel_layout} micro-batch {config.train.micro_batch_size} "
                     f"global batch {config.train.global_batch_size}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
