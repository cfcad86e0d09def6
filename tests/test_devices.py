"""Mixed GPU fleets (``--devices``, ``devices:``): parsing, the per-group partition, per-rank
memory limits, and the one planning path (a single group plans as no groups)."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from planner.core.cluster import cluster_from_dict
from planner.core.costs import P2PCost
from planner.core.devices import fleet_table, parse_devices, rank_groups
from planner.core.errors import InputError
from planner.core.paths import CLUSTERS_DIR
from planner.core.placement import stage_ranks
from planner.core.simulate import simulate
from planner.core.stage_costs import stage_costs
from solvers.partition.search import partition_for_schedule
from solvers.schedule.search.search import generate
from tests.partition_helpers import uniform_table

ROOT = Path(__file__).resolve().parents[1]
LLAMA_CLUSTER = yaml.safe_load((CLUSTERS_DIR / "llama3-8b.yaml").read_text())


def _one_line(result, pattern: str) -> None:
    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.err, result.err
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("text, pattern", [
    ("h100", r"--devices: cannot read 'h100' \(group 1\).*type:count"),
    ("h100:16,a100", r"--devices: cannot read 'a100' \(group 2\)"),
    ("h100:16,k80:16", r"--devices: unknown GPU type 'k80'.*a100"),
    ("h100:0", r"--devices: group 1 \(h100:0\) needs 1 to 16777216 GPUs"),
    ("h100:4000000000000,a100:4", r"--devices: group 1 .* needs 1 to 16777216 GPUs"),
    ("h100:16777216,a100:8", r"--devices: the groups hold 16777224 GPUs, more than 16777216"),
    ("h100:16:0", r"--devices: memory 0 GiB is not in"),
    # the round-trip grid's h5: a fleet given with --devices names the flag, not the file's devices field
    ("h100:6,a100:10", r"^error: --devices: group 1 \(h100:6\) is not a whole number of pipeline ranks "
                       r"of tp x cp x dp = 4"),
])
def test_bad_devices_strings_are_one_line_errors(ppplan, tmp_path, text, pattern):
    out = tmp_path / "plan.json"
    _one_line(ppplan("plan", "llama3-8b", "--devices", text, "--out", str(out)), pattern)
    assert not out.exists()


def test_devices_with_gpus_or_profile_is_refused(ppplan):
    fleet = ("plan", "llama3-8b", "--devices", "h100:16")
    _one_line(ppplan(*fleet, "--gpus", "16"), r"--devices: given together with --gpus")
    _one_line(ppplan(*fleet, "--gpu", "a100"), r"--gpu: given together with --devices")
    _one_line(ppplan(*fleet, "--profile", str(ROOT / "examples" / "costs" / "four_stages.json")),
              r"--devices: plans from the analytical model")


def test_parse_devices_reads_type_count_and_memory():
    groups = parse_devices("h100:16, a100:32:40")
    assert [(g.name, g.count) for g in groups] == [("h100", 16), ("a100-40g", 32)]
    assert groups[1].gpu.memory_bytes == 40 * 2**30 and groups[1].gpu.peak_flops == 312e12
    assert rank_groups(groups, 8) == (0, 0, 1, 1, 1, 1)


@pytest.mark.parametrize("devices, field", [
    ([{"type": "h100", "count": 8}, {"type": "a100", "count": 8, "memory_gib": "40"}],
     r"cluster\.devices\[1\]\.memory_gib"),
    ([{"type": "h100"}], r"cluster\.devices\[0\]\.count: missing"),
    ([{"type": "h100", "count": 8, "speed": 2}], r"cluster\.devices\[0\]\.speed: unknown field"),
    ([], r"cluster\.devices: expected a non-empty list"),
])
def test_cluster_file_devices_are_checked_on_load(devices, field):
    data = copy.deepcopy(LLAMA_CLUSTER)
    del data["gpu"], data["num_gpus"]
    data["devices"] = devices
    with pytest.raises(InputError, match=field):
        cluster_from_dict(data)


def test_cluster_file_devices_give_each_rank_its_group():
    data = copy.deepcopy(LLAMA_CLUSTER)
    del data["gpu"], data["num_gpus"]
    data["devices"] = [{"type": "h100", "count": 8}, {"type": "a100", "count": 8, "memory_gib": 40,
                                                      "network_gbps": 25}]
    spec = cluster_from_dict(data)
    assert spec.num_gpus == 16 and [g.name for g in spec.rank_devices] == ["h100", "h100", "a100-40g", "a100-40g"]
    assert spec.rank_memory_limits[2] == int(40 * 2**30 * 0.9) and spec.rank_devices[3].gpu.ib_bandwidth == 25e9
    assert spec.mean_peak_flops == (989e12 + 312e12) / 2  # the MFU denominator: every GPU at its own peak


def _fleet(slow: float = 2.0, n: int = 16, pp: int = 4):
    """Two groups of two ranks: the second ``slow`` x slower per layer, same bytes."""
    fast = uniform_table(n)
    slower = replace(fast, layers=tuple(replace(lc, f=lc.f * slow, i=lc.i * slow, w=lc.w * slow)
                                        for lc in fast.layers))
    groups = parse_devices("h100:2,a100:2")
    return fleet_table([fast, slower], groups, rank_groups(groups, 1)), fast


def test_the_partition_gives_the_slower_group_fewer_layers():
    table, fast = _fleet()
    sched = generate("1f1b", pp=4, vpp=1, microbatches=8)
    part = partition_for_schedule(table, sched, pp=4)
    sizes = [b - a for a, b in part.candidates[0]]
    assert sizes[0] + sizes[1] > sizes[2] + sizes[3], sizes
    assert max(sizes[2:]) < min(sizes[:2]), sizes
    ranks = stage_ranks(4, 4, "loop")
    mixed = simulate(sched, stage_costs(table, part.candidates[0], ranks)).step_time
    even = simulate(sched, stage_costs(table, [(0, 4), (4, 8), (8, 12), (12, 16)], ranks)).step_time
    assert mixed < 0.8 * even
    # the homogeneous table is the special case: even split
    assert [b - a for a, b in partition_for_schedule(fast, sched, pp=4).candidates[0]] == [4, 4, 4, 4]


def test_each_rank_keeps_to_its_own_memory_limit():
    table, _ = _fleet(slow=1.0)  # same speed: only memory differs
    sched = generate("1f1b", pp=4, vpp=1, microbatches=8)
    ranks = stage_ranks(4, 4, "loop")
    even = [(0, 4), (4, 8), (8, 12), (12, 16)]
    peaks = simulate(sched, stage_costs(table, even, ranks)).peak_memory_bytes
    caps = (10 * 2**30, 10 * 2**30, peaks[2] - 1, peaks[3] - 1)  # the even split breaks ranks 2 and 3
    part = partition_for_schedule(table, sched, pp=4, memory_limit_bytes=max(caps), rank_memory_bytes=caps)
    got = simulate(sched, stage_costs(table, part.candidates[0], ranks)).peak_memory_bytes
    assert all(p <= c for p, c in zip(got, caps)), (got, caps)
    assert part.candidates[0] != even


def test_cross_group_links_take_the_slower_network():
    table, _ = _fleet()
    assert table.rank_links[1] == P2PCost(latency_s=10e-6, bandwidth=25e9)  # h100 -> a100: a100's NIC
    assert table.rank_links[0] == table.p2p  # inside the h100 group
    sc = stage_costs(table, [(0, 4), (4, 8), (8, 12), (12, 16)], [0, 1, 2, 3])
    assert sc.links[1].bandwidth == 25e9 and sc.links[0] == table.p2p


def test_a_fleet_plan_names_devices_validates_and_simulates(ppplan, tmp_path):
    out = tmp_path / "mixed.json"
    res = ppplan("plan", "llama3-8b", "--devices", "h100:8,a100:8:40", "--work", "0.3", "--out", str(out), "--quiet")
    assert res.code == 0, res.err
    data = json.loads(out.read_text())
    assert [s["device"] for s in data["stages"]] == ["h100", "h100", "a100-40g", "a100-40g"]
    limits = [s["memory_limit_bytes"] for s in data["stages"]]
    assert limits[2] == int(40 * 2**30 * 0.9) < limits[0]
    layers = [s["layers"][1] - s["layers"][0] for s in data["stages"]]
    assert layers[0] + layers[1] > layers[2] + layers[3], layers
    assert all(p <= c for p, c in zip(data["predicted"]["peak_memory_bytes"], limits))
    assert ppplan("validate", str(out)).code == 0
    sim = ppplan("simulate", str(out), "--json")
    assert sim.code == 0 and json.loads(sim.out)["step_time_s"] == data["predicted"]["step_time_s"]
    flops = sum(data["stage_costs"]["flops"]) * data["microbatches"]["count"] * data["parallel"]["dp"]
    step = data["predicted"]["step_time_s"]  # the schedule's MFU divides by every GPU at its own peak
    assert json.loads(sim.out)["mfu"] == pytest.approx(flops / step / (8 * 989e12 + 8 * 312e12))
    # validate checks each rank against its own stage's limit
    data["stages"][3]["memory_limit_bytes"] = data["predicted"]["peak_memory_bytes"][3] - 1
    out.write_text(json.dumps(data))
    bad = ppplan("validate", str(out))
    assert bad.code != 0 and "rank 3 peak memory" in bad.out + bad.err


def _without_devices(data):
    data = json.loads(json.dumps(data))
    for s in data["stages"]:
        s.pop("device"), s.pop("memory_limit_bytes")
    data["cluster"].pop("devices")
    return data


def _stable(data):
    if isinstance(data, dict):
        return {k: _stable(v) for k, v in data.items() if k != "wall_s"}
    if isinstance(data, list):
        return [_stable(v) for v in data]
    return data


def test_one_group_plans_as_no_groups(ppplan, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert ppplan("plan", "llama3-8b", "--work", "0.3", "--out", str(a), "--quiet").code == 0
    assert ppplan("plan", "llama3-8b", "--devices", "h100:16", "--work", "0.3", "--out", str(b), "--quiet").code == 0
    plain, fleet = json.loads(a.read_text()), json.loads(b.read_text())
    assert _stable(_without_devices(fleet)) == _stable(plain)


def test_exports_write_the_layout_and_one_rank_order_line(ppplan, tmp_path):
    plan, args = tmp_path / "meg.json", tmp_path / "args.txt"
    res = ppplan("plan", "llama3-8b", "--devices", "h100:8,a100:8:40", "--target", "megatron", "--work", "0.3",
                 "--out", str(plan), "--quiet")
    assert res.code == 0, res.err
    out = ppplan("export", str(plan), "--format", "megatron", "--out", str(args))
    assert out.code == 0, out.err
    assert "--pipeline-model-parallel-layout" in args.read_text()
    note = [line for line in out.out.splitlines() if line.startswith("mixed fleet:")]
    assert note == ["mixed fleet: pipeline ranks 0-1 h100, 2-3 a100-40g; megatron cannot name a device per "
                    "stage, so launch with those groups' nodes in that order (pp is the outermost rank "
                    "dimension: global ranks [r x 4, (r + 1) x 4) are pipeline rank r)"]
    plain = tmp_path / "plain.json"
    res = ppplan("plan", "llama3-8b", "--target", "megatron", "--work", "0.3", "--out", str(plain), "--quiet")
    assert res.code == 0, res.err
    assert "mixed fleet" not in ppplan("export", str(plain), "--format", "megatron", "--out", str(args)).out


def test_with_pp_given_dp_follows_and_virtual_stages_run_on_their_ranks_group(ppplan, tmp_path):
    out = tmp_path / "v.json"
    res = ppplan("plan", "llama3-8b", "--devices", "h100:16,a100:16", "--pp", "4", "--vpp", "2", "--work", "0.3",
                 "--out", str(out), "--quiet")
    assert res.code == 0, res.err
    data = json.loads(out.read_text())
    assert (data["parallel"]["pp"], data["parallel"]["dp"]) == (4, 8)
    assert [s["device"] for s in data["stages"]] == ["h100", "h100", "a100", "a100"] * 2
    assert ppplan("validate", str(out)).code == 0


def test_cluster_file_devices_with_gpus_is_refused(ppplan, tmp_path):
    data = copy.deepcopy(LLAMA_CLUSTER)
    del data["gpu"], data["num_gpus"]
    data["devices"] = [{"type": "h100", "count": 8}, {"type": "a100", "count": 8}]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    _one_line(ppplan("plan", "llama3-8b", "--cluster", str(path), "--gpus", "16"),
              r"--gpus: the cluster file lists device groups")


def test_cluster_file_devices_plan_from_the_cli(ppplan, tmp_path):
    data = copy.deepcopy(LLAMA_CLUSTER)
    del data["gpu"], data["num_gpus"]
    data["devices"] = [{"type": "h100", "count": 8}, {"type": "a100", "count": 8, "memory_gib": 40}]
    path, out = tmp_path / "fleet.yaml", tmp_path / "p.json"
    path.write_text(yaml.safe_dump(data))
    res = ppplan("plan", "llama3-8b", "--cluster", str(path), "--work", "0.3", "--out", str(out), "--quiet")
    assert res.code == 0, res.err
    assert [s["device"] for s in json.loads(out.read_text())["stages"]] == ["h100", "h100", "a100-40g", "a100-40g"]


def test_replay_and_replan_refuse_a_fleet_plan_in_one_line(ppplan, tmp_path):
    out = tmp_path / "mixed.json"
    assert ppplan("plan", "llama3-8b", "--devices", "h100:8,a100:8", "--work", "0.3", "--out", str(out),
                  "--quiet").code == 0
    _one_line(ppplan("replay", str(out), "--steps", "1"), r"plan\.stages: the plan spans device groups \(a100, h100\), "
                                                         r"which ppplan replay does not model")
    trace = tmp_path / "r.json"
    trace.write_text("{}")
    _one_line(ppplan("replan", str(out), "--routing", str(trace), "--out", str(tmp_path / "n.json")),
              r"which ppplan replan does not model")


def test_cluster_file_with_gpu_and_devices_is_refused():
    data = copy.deepcopy(LLAMA_CLUSTER)
    data["devices"] = [{"type": "h100", "count": 16}]
    with pytest.raises(InputError, match=r"cluster\.gpu: given together with devices"):
        cluster_from_dict(data)


def test_where_memory_binds_the_smaller_gpus_get_fewer_layers_and_stay_within_their_limit(ppplan, tmp_path):
    out = tmp_path / "mem.json"
    res = ppplan("plan", "llama3-8b", "--devices", "a100:8,a100:8:40", "--work", "0.3", "--out", str(out), "--quiet")
    assert res.code == 0, res.err
    data = json.loads(out.read_text())
    limits = [s["memory_limit_bytes"] for s in data["stages"]]
    peaks = data["predicted"]["peak_memory_bytes"]
    assert all(p <= c for p, c in zip(peaks, limits)) and max(peaks[2:]) > 0.8 * limits[2]  # memory binds there
    layers = [s["layers"][1] - s["layers"][0] for s in data["stages"]]
    assert max(layers[2:]) < max(layers[:2]), layers
    assert data["baselines"]["uniform"]["fits_memory"] is False  # the even split breaks the 40 GB ranks


def test_devices_order_search_keeps_the_fastest_order_and_records_each(ppplan, tmp_path):
    given, searched = tmp_path / "given.json", tmp_path / "searched.json"
    args = ("plan", "llama3-8b", "--devices", "h100:8,a100:8", "--work", "0.3", "--quiet")
    assert ppplan(*args, "--out", str(given)).code == 0
    assert ppplan(*args, "--devices-order", "search", "--out", str(searched)).code == 0
    g, s = json.loads(given.read_text()), json.loads(searched.read_text())
    orders = s["solver"]["device_orders"]
    assert [o["devices"] for o in orders] == ["h100:8,a100:8", "a100:8,h100:8"]
    assert orders[0]["step_time_s"] == g["predicted"]["step_time_s"]  # the given order, planned as without search
    assert s["predicted"]["step_time_s"] == min(o["step_time_s"] for o in orders)
    best = min(orders, key=lambda o: o["step_time_s"])["devices"]
    assert [x["device"] for x in s["stages"]] == (["h100"] * 2 + ["a100"] * 2 if best.startswith("h100") else
                                                  ["a100"] * 2 + ["h100"] * 2)
    assert ppplan("validate", str(searched)).code == 0


def test_devices_order_needs_devices_and_few_groups(ppplan):
    _one_line(ppplan("plan", "llama3-8b", "--devices-order", "search"), r"--devices-order: needs --devices")
    _one_line(ppplan("plan", "llama3-8b", "--devices", "h100:4,h100:4,a100:4,a100:4,h200:4", "--devices-order",
                     "search"), r"--devices-order: search tries every order of the groups: 5 groups are too many")


def test_devices_over_several_sites_are_refused_on_the_command_line_and_in_a_file(ppplan, tmp_path):
    """Mixed fleets and two sites are modelled apart; together they are refused in one line."""
    out = tmp_path / "n.json"
    _one_line(ppplan("plan", "llama3-8b", "--devices", "h100:8,a100:8", "--sites", "2", "--inter-site-gbps", "10",
                     "--out", str(out)), r"--sites: given together with --devices")
    assert not out.exists()
    data = copy.deepcopy(LLAMA_CLUSTER)
    data.pop("gpu", None)
    data["devices"] = [{"type": "h100", "count": 8}, {"type": "a100", "count": 8}]
    data["sites"] = {"count": 2, "inter_site_gbps": 10}
    with pytest.raises(InputError, match=r"cluster\.sites: given together with devices"):
        cluster_from_dict(data)
