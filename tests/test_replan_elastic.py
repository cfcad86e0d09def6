"""``ppplan replan --gpus/--lost-ranks`` and ``ppplan diff``: valid re-plans that fit memory and
keep the global batch, a migration map that turns the old placement into the new one, one-line
errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.core.plan import load_plan_file
from planner.replanning.elastic import replan_gpus
from planner.replanning.migration import CHECKPOINT
from planner.replanning.reload import parse_ranges
from planner.replanning.search import layer_ranks
from planner.simulation import validate_plan

PLANS = Path(__file__).resolve().parent.parent / "plans" / "examples"
WORK = 0.3
"""A small budget: the tests check the re-plan's rules, not its quality."""

# (shipped plan, lost ranks): one GPU, a whole node of 8, 12.5% of the GPUs, scattered GPUs
CASES = [("qwen3-next-80b-a3b", (3,)), ("qwen3-next-80b-a3b", tuple(range(8, 16))),
         ("qwen3-30b-a3b", (0, 9, 17, 31)), ("llama3-8b", (5,)), ("llama3-8b", (6, 14))]


def _plan_path(model: str) -> Path:
    return PLANS / f"{model}.default.plan.json"


def _old_holdings(old) -> dict[int, set[int]]:
    """Device (= old global rank) -> layers, from the old plan alone (Megatron order: pp slowest)."""
    world, pp = int(old.cluster.num_gpus), int(old.parallel.pp)
    ranks = layer_ranks(old.bounds(), old.ranks())
    return {d: {k for k, r in enumerate(ranks) if r == d // (world // pp)} for d in range(world)}


def _apply(holdings: dict[int, set[int]], m: dict, lost: set[int]) -> dict[int, set[int]]:
    """The migration map applied: drop every layer, keep what ``kept`` says, add what is sent."""
    out: dict[int, set[int]] = {}
    for t in m["layers"]:
        k = t["layer"]
        for d in parse_ranges(t["kept"]):
            assert k in holdings[d] and d not in lost, (k, d)
            out.setdefault(d, set()).add(k)
        for src, dst in t["sends"]:
            assert src == CHECKPOINT or (k in holdings[src] and src not in lost), (k, src)
            out.setdefault(dst, set()).add(k)
    return out


@pytest.mark.parametrize("model,lost", CASES, ids=[f"{m}-lose{len(x)}" for m, x in CASES])
def test_replan_after_lost_gpus(model, lost):
    old = load_plan_file(_plan_path(model))
    r = replan_gpus(old, lost_ranks=lost, work=WORK)
    new, s, m = r.plan, r.plan.extra["replan"], r.plan.extra["migration"]
    assert validate_plan(new) == []
    assert max(new.predicted.peak_memory_bytes) <= new.memory_limit_bytes
    assert new.cluster.training["global_batch"] == old.cluster.training["global_batch"] == s["global_batch_after"]
    world, used = int(old.cluster.num_gpus), int(new.cluster.num_gpus)
    assert s["gpus_available"] == world - len(lost) and used + len(r.idle) == world - len(lost)
    assert s["step_after_s"] > 0 and 0 < s["throughput_per_gpu_kept"] <= 1.5
    # applying the map to the old placement gives the new one: every used device holds exactly
    # the layers of one new pipeline rank, each rank on world / pp devices, no lost or idle device
    after = _apply(_old_holdings(old), m, set(lost))
    assert set(after).isdisjoint(set(lost) | set(r.idle)) and len(after) == used
    ranks = layer_ranks(new.bounds(), new.ranks())
    per_rank = [{k for k, x in enumerate(ranks) if x == rank} for rank in range(new.pp)]
    for rank, layers in enumerate(per_rank):
        holders = [d for d, held in after.items() if held == layers]
        assert len(holders) == used // new.pp, (rank, len(holders))
        assert sorted(holders) == parse_ranges(m["layers"][min(layers)]["after"])
    assert m["bytes_moved"] == sum(t["bytes_per_gpu"] * len(t["sends"]) for t in m["layers"]) - m["link_bytes"]["local"]
    assert [x[0] for s_ in m["stages"] for x in s_["local"]] == list(range(len(ranks)))


def test_lost_node_reads_its_layers_from_the_checkpoint():
    """Losing the node that held pipeline rank 0 (pp 8 x 8 GPUs) leaves no copy of its layers."""
    r = replan_gpus(_plan_path("qwen3-next-80b-a3b"), lost_ranks=tuple(range(8)), work=WORK)
    m = r.plan.extra["migration"]
    first = m["layers"][0]
    assert first["before"] == "0-7" and all(src == CHECKPOINT for src, _ in first["sends"])
    assert m["link_bytes"]["checkpoint"] >= first["bytes_per_gpu"] * len(first["sends"])


def test_gpus_keeps_the_batch_or_changes_it_when_allowed():
    path = _plan_path("qwen3-next-80b-a3b")
    kept = replan_gpus(path, gpus=63, work=WORK).plan
    assert kept.cluster.training["global_batch"] == 256 and kept.cluster.num_gpus < 63
    changed = replan_gpus(path, gpus=63, allow_batch_change=True, work=WORK).plan
    assert 224 <= changed.cluster.training["global_batch"] <= 256
    assert validate_plan(changed) == []


def test_diff_of_two_plans(ppplan, tmp_path):
    path = str(_plan_path("qwen3-next-80b-a3b"))
    new = tmp_path / "new.json"
    run = ppplan("replan", path, "--gpus", "56", "--work", str(WORK), "--out", str(new))
    assert run.code == 0, run.err
    assert "tokens/s/GPU" in run.out and "bytes moved" in run.out
    same = ppplan("diff", path, path, "--json")
    assert same.code == 0, same.err
    data = json.loads(same.out)
    assert data["bytes_moved"] == 0 and all(t["kept"] == t["after"] and not t["sends"] for t in data["layers"])
    text = ppplan("diff", path, str(new))
    assert text.code == 0, text.err
    stored = json.loads(new.read_text())["migration"]
    assert re.search(rf"bytes moved\s+{stored['bytes_moved'] / 1e9:.1f} GB", text.out)
    assert "--pipeline-model-parallel-layout" in text.out and "embedding, decoder 0-" in text.out


def _one_line(result, pattern: str) -> None:
    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("args,pattern", [
    ([], r"exactly one of --routing, --gpus, --lost-ranks \(got none\)"),
    (["--gpus", "8", "--lost-ranks", "1"], r"exactly one of .*got --gpus, --lost-ranks"),
    (["--lost-ranks", "64"], r"--lost-ranks: '64' is outside the plan's ranks 0-63"),
    (["--lost-ranks", "a,b"], r"--lost-ranks: 'a' is not a rank"),
    (["--lost-ranks", "0-63"], r"--lost-ranks: all 64 ranks lost"),
    (["--gpus", "1"], r"--gpus: no degree combination of 1 GPUs or fewer keeps the global batch 256.*"
                      r"--allow-batch-change"),
    (["--gpus", "8", "--window", "3"], r"--window goes with --routing, not --gpus"),
    (["--routing", "x.jsonl", "--allow-batch-change"], r"--allow-batch-change goes with --gpus"),
])
def test_bad_input_is_one_line(ppplan, tmp_path, args, pattern):
    out = tmp_path / "new.json"
    _one_line(ppplan("replan", str(_plan_path("qwen3-next-80b-a3b")), *args, "--work", str(WORK),
                     "--out", str(out)), pattern)
    assert not out.exists()


def test_diff_refuses_plans_of_two_models(ppplan):
    _one_line(ppplan("diff", str(_plan_path("qwen3-next-80b-a3b")), str(_plan_path("llama3-8b"))),
              r"NEW: is a plan of llama3-8b .*diff two plans of the same model")


def test_a_gpu_keeps_a_shard_only_at_the_same_offset():
    """Same degrees, two GPUs of a pipeline block swapped: their shards differ (re-sliced in
    place, no link); the others keep theirs; nothing moves over a link."""
    from planner.core.hf_config import load_model
    from planner.replanning.diff import placement_of
    from planner.replanning.inputs import plan_cluster
    from planner.replanning.migration import device_migration

    old = load_plan_file(_plan_path("llama3-8b"))
    cl, world = plan_cluster(old), int(old.cluster.num_gpus)
    swapped = [1, 0, *range(2, world)]
    move = device_migration(load_model("llama3-8b"), placement_of(old, cl, range(world)),
                            placement_of(old, cl, swapped))
    first = move.layers[0]
    assert first.kept == tuple(range(2, world // old.pp)) and sorted(first.sends) == [(0, 0), (1, 1)]
    assert move.bytes_moved == 0 and move.link_bytes["local"] > 0


def test_standby_roles_that_fit_a_smaller_gpu():
    """The ends of the pipeline need the most memory in Qwen3-Next's plan except the last
    rank (head and MTP, few layers): a 40 GiB spare takes only that role."""
    from dataclasses import replace

    from planner.core.hardware import GPU_PRESETS
    from planner.core.hf_config import load_model
    from planner.replanning.standby import role_of_ranks, standby_fit

    old = load_plan_file(_plan_path("qwen3-next-80b-a3b"))
    spec = load_model("qwen3-next-80b-a3b")
    assert role_of_ranks(old, spec) == ["first", *["middle"] * 6, "last"]
    small = replace(GPU_PRESETS["h100"], name="h100-40g", memory_bytes=40 * 2**30)
    fit = standby_fit(old, spec, small, 1, lost=(63,))
    assert {r["role"]: r["fits"] for r in fit["roles"]} == {"first": False, "middle": False, "last": True}
    assert fit["lost_roles"] == ["last"] and fit["swap_keeps_plan"]
    assert not standby_fit(old, spec, small, 1, lost=(3,))["swap_keeps_plan"]
    assert not standby_fit(old, spec, GPU_PRESETS["h100"], 1, lost=(3, 63))["swap_keeps_plan"]  # too few spares


def test_standby_on_the_command_line(ppplan, tmp_path):
    run = ppplan("replan", str(_plan_path("qwen3-next-80b-a3b")), "--lost-ranks", "3", "--standby", "a100:1",
                 "--work", str(WORK), "--out", str(tmp_path / "new.json"))
    assert run.code == 0, run.err
    assert re.search(r"standby\s+1 x a100 .*lost ranks were first: spares keep the old plan", run.out)
    _one_line(ppplan("replan", str(_plan_path("qwen3-next-80b-a3b")), "--lost-ranks", "3", "--standby", "a100",
                     "--out", str(tmp_path / "x.json")), r"--standby: 'a100' is not TYPE:COUNT")


def test_more_gpus_fetch_state_from_the_old_ones():
    """A restart on twice the GPUs: the new devices held nothing, every shard they load comes
    from one of the old devices, none from the checkpoint."""
    r = replan_gpus(_plan_path("llama3-8b"), gpus=32, work=WORK)
    m = r.plan.extra["migration"]
    assert r.plan.cluster.num_gpus <= 32 and validate_plan(r.plan) == []
    sends = [pair for t in m["layers"] for pair in t["sends"]]
    assert sends and all(0 <= src < 16 for src, _ in sends) and m["link_bytes"]["checkpoint"] == 0
    assert any(dst >= 16 for _, dst in sends)


def test_diff_refuses_an_unreadable_plan(ppplan, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    _one_line(ppplan("diff", str(_plan_path("llama3-8b")), str(bad)), r"plan: 'schema_version' is a required")


def _benchmark_cases() -> list[tuple[str, str, tuple[int, ...]]]:
    from tests.benchmark_modules import load_benchmark

    elastic = load_benchmark("elastic")
    return [(case, *elastic.CASES[case]) for case in elastic.DEFAULT]


@pytest.mark.slow
@pytest.mark.parametrize("case,name,lost", _benchmark_cases(), ids=[c for c, _, _ in _benchmark_cases()])
def test_every_benchmark_case_applies(case, name, lost):
    """The cases of benchmarks/elastic.py (up to DeepSeek-V3 at 1024 GPUs) at a small budget:
    valid, in memory, batch kept, and the map turns the old placement into the new one."""
    from tests.benchmark_modules import load_benchmark

    old = load_benchmark("elastic")._old_plan(name, WORK)
    r = replan_gpus(old, lost_ranks=lost, work=WORK)
    new, m = r.plan, r.plan.extra["migration"]
    assert validate_plan(new) == [] and max(new.predicted.peak_memory_bytes) <= new.memory_limit_bytes
    assert new.cluster.training["global_batch"] == old.cluster.training["global_batch"]
    after = _apply(_old_holdings(old), m, set(lost))
    ranks = layer_ranks(new.bounds(), new.ranks())
    want = {d: {k for k, x in enumerate(ranks) if x == g // (len(after) // new.pp)}
            for g, d in enumerate(_new_devices(m, new))}
    assert after == want


def _new_devices(m: dict, new) -> list[int]:
    """Device of each new global rank, read from the map's per-layer ``after`` (in rank order)."""
    first = {}
    for t in m["layers"]:
        first.setdefault(layer_ranks(new.bounds(), new.ranks())[t["layer"]], parse_ranges(t["after"]))
    return [d for rank in range(new.pp) for d in first[rank]]


def test_a_plan_on_gpus_without_fp8_re_plans():
    """An A100 plan stores ``fp8_peak_flops: 0`` (no FP8); re-planning reads it back."""
    from planner.api import plan as make_plan

    old = make_plan("llama3-8b", gpu="a100", work=WORK)
    assert old.cluster.gpu["fp8_peak_flops"] == 0
    new = replan_gpus(old, gpus=8, work=WORK).plan
    assert new.cluster.gpu["name"] == "a100" and validate_plan(new) == []
