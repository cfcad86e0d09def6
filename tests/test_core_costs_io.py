"""Cost-table JSON: save -> load gives an equal table; schema and semantic errors name the field."""

from __future__ import annotations

import json

import pytest

from planner.core.cluster import load_cluster, default_cluster_path
from planner.core.costs_io import costs_from_dict, costs_to_dict, load_costs, save_costs
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from profiler.analytical import analytical_costs


def test_round_trip_toy_table(tmp_path, toy_table):
    table = toy_table()
    path = tmp_path / "costs.json"
    save_costs(table, path)
    assert load_costs(path) == table


@pytest.mark.parametrize("model", ["qwen3-next-80b-a3b", "deepseek-v3"])
def test_round_trip_analytical_table(tmp_path, model):
    spec = load_model(model)
    table = analytical_costs(spec, load_cluster(default_cluster_path(model)))
    path = tmp_path / "costs.json"
    save_costs(table, path)
    back = load_costs(path)
    assert back == table
    assert back.ov(1, 2) == table.ov(1, 2)
    assert json.loads(path.read_text())["kind"] == "ppplan.costs"


def test_pair_entries_report_hidden_share(toy_table):
    data = costs_to_dict(toy_table(overlap=0.7))
    for pair in data["pairs"]:
        assert pair["hidden_share"] == pytest.approx(0.3)
        assert pair["ov"] == pytest.approx(0.7 * pair["serial"])


def _edited(toy_table, edit) -> dict:
    data = costs_to_dict(toy_table())
    edit(data)
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("layers"), r"profile: 'layers' is a required property"),
    (lambda d: d.update(kind="ppplan.plan"), r"profile\.kind"),
    (lambda d: d.update(schema_version=2), r"profile\.schema_version"),
    (lambda d: d["layers"][2].update(f=-1.0), r"profile\.layers\[2\]\.f: -1\.0 is less than the minimum"),
    (lambda d: d["layers"][1].update(speed=3), r"profile\.layers\[1\]"),
    (lambda d: d["layers"][1].pop("w"), r"profile\.layers\[1\]: 'w' is a required property"),
    (lambda d: d["layers"][3].update(imbalance=0.5), r"profile\.layers\[3\]\.imbalance"),
    (lambda d: d["p2p"].update(bandwidth=0), r"profile\.p2p\.bandwidth"),
    (lambda d: d.update(layers=[]), r"profile\.layers"),
    (lambda d: d["pairs"][0].update(f_type="mamba"), r"profile\.pairs\[0\]\.f_type: unknown layer type 'mamba'"),
    (lambda d: d["layers"][1].update(act_w_bytes=2 * d["layers"][1]["act_bytes"]),
     r"profile\.layers\[1\]\.act_w_bytes: \d+ exceeds act_bytes"),
    (lambda d: d.update(size_curve=[[0, 1.0]]), r"profile\.size_curve\[0\]\[0\]"),
])
def test_bad_cost_tables_name_the_field(toy_table, edit, field):
    with pytest.raises(InputError, match=field):
        costs_from_dict(_edited(toy_table, edit), what="profile")


def test_bad_files(tmp_path):
    with pytest.raises(InputError, match="profile: cannot read"):
        load_costs(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"layers": [}')
    with pytest.raises(InputError, match=r"profile: .* is not valid JSON \(line 1"):
        load_costs(bad)
    bad.write_text("[]")
    with pytest.raises(InputError, match="profile: .* is not of type 'object'"):
        load_costs(bad)


def test_save_is_atomic_on_failure(tmp_path, toy_table, monkeypatch):
    path = tmp_path / "costs.json"
    path.write_text("old")
    import planner.core.jsonio as jsonio

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(jsonio.os, "replace", boom)
    with pytest.raises(InputError, match=r"--out: cannot write .*costs\.json: disk full"):
        save_costs(toy_table(), path)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["costs.json"]


def test_a_profile_of_another_model_is_refused_by_plan_and_replan_alike(tmp_path, toy_table):
    """One reader (``load_costs_for``) for ``ppplan plan --profile`` and ``ppplan replan --profile``:
    the same one-line refusal, each with its own fix."""
    from planner.planning.cost_tables import plan_costs
    from planner.replanning.costs import routed_costs

    path = tmp_path / "costs.json"
    save_costs(toy_table(), path)
    spec = load_model("llama3-8b")
    cluster = load_cluster(default_cluster_path("llama3-8b"))
    wrong = rf"--profile: has {toy_table().num_layers} layers, model llama3-8b has {spec.num_layers}"
    with pytest.raises(InputError, match=wrong + r".*profile the same model"):
        plan_costs(spec, cluster, path)
    with pytest.raises(InputError, match=wrong + r".*pass the profile the plan was made from"):
        routed_costs(spec, cluster, [1.0] * spec.num_layers, profile=path)
