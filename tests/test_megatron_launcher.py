"""``examples/megatron_launcher.py --nodes N`` plans for the GPUs it launches, and Megatron's own
arithmetic on the command it builds (world size, data-parallel size, microbatches) gives the plan's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "megatron_launcher.py"
calculator = pytest.importorskip("megatron.core.num_microbatches_calculator",
                                 reason="megatron-core not installed (pip install -e '.[frameworks]')")


def _launcher():
    spec = importlib.util.spec_from_file_location("megatron_launcher_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flag(cmd: list[str], name: str, default: int = 1) -> int:
    return int(cmd[cmd.index(name) + 1]) if name in cmd else default


def _megatron_sizes(cmd: list[str]) -> tuple[int, int, int]:
    """(world size, data-parallel size, microbatches per step) as Megatron derives them."""
    nodes = int(next(a for a in cmd if a.startswith("--nnodes=")).split("=")[1])
    per_node = int(next(a for a in cmd if a.startswith("--nproc-per-node=")).split("=")[1])
    world = nodes * per_node
    model = (_flag(cmd, "--tensor-model-parallel-size") * _flag(cmd, "--pipeline-model-parallel-size")
             * _flag(cmd, "--context-parallel-size"))
    # megatron/core/parallel_state.py initialize_model_parallel: world % (tp x pp x cp) == 0, dp the rest
    assert world % model == 0, (world, model)
    dp = world // model
    micro = calculator.ConstantNumMicroBatchesCalculator(
        _flag(cmd, "--global-batch-size"), _flag(cmd, "--micro-batch-size"), dp,
        decrease_batch_size_if_needed=False, rank=0).get()
    return world, dp, micro


@pytest.mark.parametrize("nodes", [2, 4])
def test_launcher_plans_for_the_gpus_it_launches(nodes):
    launcher = _launcher()
    p = launcher.launch_plan(model="llama3-8b", nodes=nodes, gpus_per_node=8, pp=4, work=1.0)
    cmd = launcher.command(p, nodes=nodes, gpus_per_node=8, data_path="/data/x")
    world, dp, micro = _megatron_sizes(cmd)
    assert world == nodes * 8 == p.cluster.num_gpus
    assert dp == p.parallel["dp"] == nodes * 8 // 4
    assert micro == p.num_microbatches
    assert _flag(cmd, "--pipeline-model-parallel-size") == p.pp
    args = p.megatron_args()
    layout = "--pipeline-model-parallel-layout"
    assert cmd[cmd.index(layout) + 1] == args[args.index(layout) + 1]


def test_launcher_command_line_with_four_nodes_matches_the_plan_it_writes(tmp_path):
    from planner.core.plan import load_plan_file

    run = subprocess.run([sys.executable, str(EXAMPLE), "--json", "--nodes", "4", "--pp", "4",
                          "--plan-out", str(tmp_path / "plan.json")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    cmd, p = json.loads(run.stdout), load_plan_file(tmp_path / "plan.json")
    assert cmd[:4] == ["torchrun", "--nnodes=4", "--nproc-per-node=8", "pretrain_gpt.py"]
    assert _megatron_sizes(cmd) == (32, p.parallel["dp"], p.num_microbatches) == (32, 8, p.num_microbatches)


def test_launcher_refuses_a_gpu_count_the_batch_cannot_split_over():
    run = subprocess.run([sys.executable, str(EXAMPLE), "--nodes", "3", "--pp", "4"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "24 GPUs" in lines[0], lines
