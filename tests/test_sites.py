"""Two sites joined by a slow link: the sites section, the hop on the crossing pipeline boundary,
the hierarchical DP reduction, and the pp/dp choice with its crossover."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import yaml

from planner.core.cluster import load_cluster
from planner.core.costs import P2PCost
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.p2p import SiteHop
from planner.core.paths import CLUSTERS_DIR
from planner.core.simulate import simulate
from planner.core.sites import SitesSpec, sites_from_config
from profiler.cost_model.comm import ring_seconds, site_ring_seconds
from solvers.schedule.families.generators import interleaved_1f1b, one_f_one_b

LINK = P2PCost(latency_s=0.01, bandwidth=1e9)
HOP = SiteHop(count=2, link=P2PCost(latency_s=0.5, bandwidth=1e8))


def _cluster_file(tmp_path, sites: dict | None, **parallel) -> str:
    data = yaml.safe_load((CLUSTERS_DIR / "llama3-8b.yaml").read_text())
    data["parallel"].update(parallel)
    if sites is not None:
        data["sites"] = sites
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("pp", [2, 4, 6])
def test_the_hop_is_charged_once_each_way_on_the_crossing_boundary(make_costs, pp):
    # One microbatch goes down and back up: every boundary costs 0.02 s each way, except the
    # one between site 0 (ranks < pp/2) and site 1, which costs the hop: 0.5 + 1e7 / 1e8.
    costs = make_costs(pp, f=1.0, i=2.0, out=10**7, p2p=LINK)
    hopped = replace(costs, site_hop=HOP)
    assert [hopped.p2p_time(b) for b in range(pp)] == \
        [pytest.approx(0.6 if b == pp // 2 - 1 else 0.02) for b in range(pp)]
    plain = simulate(one_f_one_b(pp, 1), costs).step_time
    grown = simulate(one_f_one_b(pp, 1), hopped).step_time
    assert grown - plain == pytest.approx(2 * (0.6 - 0.02))


def test_interleaved_stages_cross_where_their_ranks_change_site(make_costs):
    # Loop placement, pp 4 x vpp 2: stage s on rank s % 4; sites {0,1} and {2,3}. Boundaries
    # 1 (rank 1 -> 2), 3 (rank 3 -> 0) and 5 (rank 1 -> 2) join the two sites.
    costs = replace(make_costs(4, 2, out=10**7, p2p=LINK), site_hop=HOP)
    assert [b for b in range(8) if HOP.crosses(b, costs.ranks)] == [1, 3, 5]
    sim = simulate(interleaved_1f1b(4, 2, 8), costs)
    assert sim.step_time > simulate(interleaved_1f1b(4, 2, 8), make_costs(4, 2, out=10**7, p2p=LINK)).step_time


def test_the_site_ring_is_a_ring_inside_each_site_then_across(tmp_path):
    cl = load_cluster(_cluster_file(tmp_path, {"count": 2, "inter_site_gbps": 80, "inter_site_latency_ms": 5}))
    one = load_cluster(_cluster_file(tmp_path, None))
    assert site_ring_seconds(8e9, 4, 50e9, one) == ring_seconds(8e9, 4, 50e9)
    share = 80e9 / 8 / (16 / 2)  # every GPU of a site crosses at once
    expected = 8e9 * (1 / 2) / 50e9 + (8e9 / 2) * (1 / 2) / share + 5e-3
    assert site_ring_seconds(8e9, 4, 50e9, cl) == pytest.approx(expected)


@pytest.mark.parametrize("value, pattern", [
    ({"count": 0, "inter_site_gbps": 10}, r"sites\.count: expected a positive integer"),
    ({"count": 2}, r"sites\.inter_site_gbps: expected a positive number"),
    ({"count": 2, "inter_site_gbps": -1}, r"sites\.inter_site_gbps"),
    ({"count": 2, "inter_site_gbps": 10, "inter_site_latency_ms": float("nan")}, r"inter_site_latency_ms"),
    ({"count": 2, "inter_site_gbps": 10, "crossing": "tp"}, r"sites\.crossing: unknown 'tp'"),
    ({"count": 2, "inter_site_gbps": 10, "bandwidth": 3}, r"sites\.bandwidth: unknown field"),
    ([2], r"sites: expected a mapping"),
])
def test_a_bad_sites_section_names_the_field(value, pattern):
    with pytest.raises(InputError, match=pattern):
        sites_from_config(value, where="sites")


def test_crossings_never_put_tp_or_ep_across_sites():
    sites = SitesSpec(count=2, inter_site_gbps=10)
    assert sites.crossings(num_gpus=16, pp=4, dp=4, tp=1, cp=1, ep=1, etp=1) == ("pp", "dp")
    assert sites.crossings(num_gpus=16, pp=1, dp=2, tp=8, cp=1, ep=1, etp=1) == ("dp",)
    # dp 2 over 2 sites leaves one replica of tp 2 per site: an ep 4 group would span both.
    assert sites.crossings(num_gpus=16, pp=4, dp=2, tp=2, cp=1, ep=4, etp=1) == ("pp",)
    assert replace(sites, crossing="dp").crossings(num_gpus=16, pp=4, dp=2, tp=2, cp=1, ep=4, etp=1) == ()
    with pytest.raises(InputError, match=r"tp or ep would cross the inter-site link"):
        sites.check_degrees(num_gpus=16, pp=1, dp=1, tp=16, cp=1, ep=1, etp=1)


def _one_line_error(result, pattern: str) -> None:
    import re

    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.err, result.err
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("argv, pattern", [
    (["--sites", "2"], r"--inter-site-gbps: is needed with 2 sites"),
    (["--sites", "3", "--inter-site-gbps", "10"], r"16 GPUs do not split evenly over 3 sites"),
    (["--sites", "2", "--inter-site-gbps", "10", "--pp", "1", "--tp", "16", "--dp", "1"],
     r"sites: neither pp 1 nor dp 1 splits over 2 sites"),
    (["--sites", "2", "--inter-site-gbps", "0"], r"--inter-site-gbps"),
    (["--sites", "0", "--inter-site-gbps", "10"], r"--sites"),
    (["--inter-site-gbps", "10"], r"--inter-site-gbps: needs more than one site"),
    (["--gpus", "15", "--sites", "2", "--inter-site-gbps", "10"], r"--gpus: 15 GPUs do not split evenly over 2 sites"),
    (["--sites", "2", "--inter-site-gbps", "10", "--inter-site-latency-ms", "-1"], r"--inter-site-latency-ms"),
])
def test_bad_sites_flags_fail_in_one_line(ppplan, tmp_path, argv, pattern):
    result = ppplan("plan", "llama3-8b", *argv, "--work", "0.2", "--out", "p.json")
    _one_line_error(result, pattern)
    assert not (tmp_path / "p.json").exists()


def test_a_bad_sites_section_in_a_cluster_file_fails_in_one_line(ppplan, tmp_path):
    path = _cluster_file(tmp_path, {"count": 2, "inter_site_gbps": 10, "crossing": "ep"})
    _one_line_error(ppplan("plan", "llama3-8b", "--cluster", path, "--out", "p.json"),
                    r"cluster\.sites\.crossing: unknown 'ep'")


def test_a_plan_over_two_sites_records_the_crossing_validates_and_simulates(ppplan, tmp_path):
    result = ppplan("plan", "llama3-8b", "--sites", "2", "--inter-site-gbps", "10", "--inter-site-latency-ms", "10",
                    "--work", "0.2", "--out", "p.json")
    assert result.code == 0, result.err
    plan = json.loads((tmp_path / "p.json").read_text())
    sites = plan["sites"]
    assert f"sites 2 over 10 Gb/s, 10 ms: {sites['crossing']} crosses" in result.out
    assert {k: sites[k] for k in ("count", "inter_site_gbps", "inter_site_latency_ms")} == \
        {"count": 2, "inter_site_gbps": 10.0, "inter_site_latency_ms": 10.0}
    assert set(sites["steps_s"]) == {"pp", "dp"}
    assert sites["crossing"] == min(sites["steps_s"], key=sites["steps_s"].get)
    assert plan["predicted"]["optimizer_step_time_s"] == pytest.approx(sites["steps_s"][sites["crossing"]])
    assert ("site_hop" in plan["stage_costs"]) == (sites["crossing"] == "pp")
    assert ppplan("validate", "p.json").code == 0
    sim = ppplan("simulate", "p.json", "--json")
    assert sim.code == 0, sim.err
    assert json.loads(sim.out)["step_time_s"] == plan["predicted"]["step_time_s"]


@pytest.fixture(scope="module")
def crossing_plans():
    """llama3-8b (pp 4 x dp 4) over two sites, 100 ms apart, planned with each crossing."""
    from planner.api import plan, resolve_cluster
    from planner.planning.sites import with_crossing

    model = load_model("llama3-8b")
    base = resolve_cluster(model, None, sites={"count": 2, "inter_site_gbps": 10, "inter_site_latency_ms": 100})
    out = {}
    for c in ("pp", "dp"):
        cl = with_crossing(base, c)
        out[c] = (plan("llama3-8b", cl, work=0.2), cl)
    return model, out


def test_the_winner_flips_at_the_crossover(crossing_plans):
    from planner.planning.sites import crossover_gbps, step_at

    model, plans = crossing_plans
    cross = crossover_gbps(plans, model, 10.0)
    assert cross is not None and 0.1 < cross < 10000

    def lead(g: float) -> float:  # > 0: dp faster
        return step_at(plans["pp"][0], model, plans["pp"][1], g) - step_at(plans["dp"][0], model, plans["dp"][1], g)

    assert (lead(cross / 1.02) > 0) != (lead(cross * 1.02) > 0)
    # Between the planned 10 Gb/s and the crossover the winner does not change.
    grid = [10 * (cross / 10) ** (k / 16) for k in range(16)]
    assert len({lead(g) > 0 for g in grid}) == 1
    # At 1 Gb/s the whole gradient over the link costs more than the activations: pp crosses.
    assert lead(1.0) < 0 and math.isfinite(lead(1.0))


def test_more_microbatches_over_the_same_gradient_make_dp_cross(ppplan, tmp_path):
    # Llama-3-8B at 1 Gb/s: the shipped global batch 128 (32 microbatches per pipeline) sends
    # less over the link through one pipeline boundary than the gradient; 1024 sends 8x more.
    steps = {}
    for batch in (128, 1024):
        result = ppplan("plan", "llama3-8b", "--global-batch", str(batch), "--sites", "2", "--inter-site-gbps", "1",
                        "--inter-site-latency-ms", "10", "--work", "0.2", "--out", f"p{batch}.json", "--quiet")
        assert result.code == 0, result.err
        steps[batch] = json.loads((tmp_path / f"p{batch}.json").read_text())["sites"]
    assert steps[128]["crossing"] == "pp" and steps[1024]["crossing"] == "dp"
    assert steps[1024]["steps_s"]["pp"] / steps[128]["steps_s"]["pp"] > 7.5  # the link floor grows with M


def test_the_link_busy_time_floors_the_pipeline_step(make_costs):
    # pp 4 on two sites: boundary 1 crosses; 8 microbatches of 1e7 bytes each way at 1e8 B/s keep
    # each direction of the link busy 0.8 s, longer than this schedule's 0.5 s of compute.
    from planner.planning.dp_step import site_link_busy
    from planner.planning.prediction import predict_optimizer_step

    costs = replace(make_costs(4, f=0.01, i=0.02, out=10**7, p2p=LINK), site_hop=HOP)
    assert site_link_busy(costs, 8) == pytest.approx(8 * 10**7 / 1e8)
    assert site_link_busy(make_costs(4, out=10**7, p2p=LINK), 8) == 0.0
    model = load_model("llama3-8b")
    cl = load_cluster(CLUSTERS_DIR / "llama3-8b.yaml")
    free = predict_optimizer_step(model, cl, step_time_s=0.5, peak_memory_bytes=[0] * 4, microbatch_compute_s=0.03,
                                  microbatches=8)
    floored = predict_optimizer_step(model, cl, step_time_s=0.5, peak_memory_bytes=[0] * 4,
                                     microbatch_compute_s=0.03, microbatches=8, link_busy_s=0.8)
    assert floored.optimizer_step_time_s - free.optimizer_step_time_s == pytest.approx(0.3)
    assert floored.step_time_s == 0.5  # the schedule's own makespan is what simulate reports


def test_the_degree_search_keeps_tp_and_ep_inside_a_site(ppplan, tmp_path):
    # 24 GPUs: tp 8 leaves pp x dp = 3, which no crossing splits over two sites of 12 GPUs.
    result = ppplan("plan", "llama3-8b", "--gpus", "24", "--sites", "2", "--inter-site-gbps", "10",
                    "--work", "0.5", "--out", "p.json", "--quiet")
    assert result.code == 0, result.err
    plan = json.loads((tmp_path / "p.json").read_text())
    par, sites = plan["parallel"], plan["sites"]
    assert par[sites["crossing"]] % 2 == 0 and par["tp"] * par["ep"] <= 12
    assert plan["predicted"]["optimizer_step_time_s"] == pytest.approx(sites["steps_s"][sites["crossing"]])
