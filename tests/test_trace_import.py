"""``ppplan profile --from-trace``: a synthetic trace with known F, I, W, B, all-to-all and
hidden share read back into a cost table; bad folders refused in one line; HTA's own GPU
test trace parsed with its comm/compute overlap equal to what HTA reports."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from planner.core.costs_io import load_costs
from profiler.trace.names import a2a_range, layer_range, pair_range, parse_range

HTA_TRACE = Path(__file__).parent / "data" / "trace" / "hta_sampled_rank-0.json.gz"
RUN = {"model": "qwen3-30b-a3b", "scale": 0.05, "seq_len": 128, "micro_batch": 1}


def _x(name: str, ts: float, dur: float, tid: int = 1, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def _rank_events(t0: float) -> list[dict]:
    """One step of known ranges (microseconds) on thread 1, and a head W on thread 2 that
    runs beside half of the gqa+moe forward's all-to-all."""
    ev = [_x("ProfilerStep#0", t0, 20000)]
    t = t0 + 10
    ev += [_x(layer_range("F", 0, "embedding"), t, 100), _x(layer_range("B", 0, "embedding"), t + 200, 50)]
    t += 400
    ev += [_x(layer_range("F", 1, "gqa+moe"), t, 1000), _x(a2a_range("dispatch"), t + 300, 200)]
    ev += [_x(layer_range("W", 49, "head"), t + 400, 300, tid=2)]
    t += 1100
    ev += [_x(layer_range("I", 1, "gqa+moe"), t, 1500), _x(a2a_range("combine.grad"), t + 100, 300)]
    t += 1600
    ev += [_x(layer_range("W", 1, "gqa+moe"), t, 700)]
    t += 800
    ev += [_x(layer_range("F", 49, "head"), t, 400), _x(layer_range("I", 49, "head"), t + 500, 600),
           _x(layer_range("W", 49, "head"), t + 1200, 300)]
    t += 1600
    ev += [_x(pair_range("gqa+moe", "gqa+moe"), t, 2500)]
    # the last profiler step is dropped, as HTA drops it: its outlier must not count
    ev += [_x("ProfilerStep#1", t0 + 30000, 100000), _x(layer_range("F", 1, "gqa+moe"), t0 + 30010, 99999)]
    return ev


def _write_trace(folder: Path, rank: int, *, gz: bool = True) -> None:
    data = {"schemaVersion": 1, "distributedInfo": {"rank": rank}, "ppplan": json.dumps(RUN),
            "traceEvents": [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0}] + _rank_events(1e6 * rank)}
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data)
    if gz:
        (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (folder / f"rank-{rank}.json").write_text(text)


def test_range_names_round_trip():
    assert parse_range(layer_range("I", 12, "gqa+moe")).index == 12
    assert parse_range(layer_range("W", 3, "mtp:mla+moe")).type == "mtp:mla+moe"
    assert parse_range(pair_range("a", "b")).b_type == "b"
    assert parse_range(a2a_range("dispatch")).what == "a2a"
    assert parse_range("ProfilerStep#3") is None and parse_range("ppplan/X/1/t") is None


def test_synthetic_trace_gives_known_costs(tmp_path, ppplan):
    for rank, gz in ((0, True), (1, False)):
        _write_trace(tmp_path / "run", rank, gz=gz)
    result = ppplan("profile", "--from-trace", str(tmp_path / "run"), "--out", "p.json")
    assert result.code == 0, result.err
    table = load_costs(tmp_path / "p.json")
    by = {lc.type: lc for lc in table.layers}
    moe, head, emb = by["gqa+moe"], by["head"], by["embedding"]
    assert moe.f == pytest.approx(800e-6) and moe.i == pytest.approx(1200e-6) and moe.w == pytest.approx(700e-6)
    assert moe.a2a_f == pytest.approx(100e-6)  # 200 us, half hidden under the other thread's compute
    assert moe.a2a_b == pytest.approx(300e-6)
    assert moe.b is None
    assert head.f == pytest.approx(400e-6) and head.i == pytest.approx(600e-6) and head.w == pytest.approx(300e-6)
    assert emb.b == pytest.approx(50e-6) and emb.i + emb.w == pytest.approx(50e-6)
    assert table.pairs[("gqa+moe", "gqa+moe")] == pytest.approx(2.5e-3)
    trace = table.meta["trace"]
    assert trace["hidden_share"]["gqa+moe"] == {"F": pytest.approx(0.5), "B": 0.0}
    assert trace["ranks"] == 2 and trace["clock"] == ["host"]
    assert trace["samples"]["gqa+moe"] == {"F": 2, "I": 2, "W": 2, "B": 0, "L": 0}
    prov = trace["provenance"]
    assert prov["layers"]["gqa+moe"]["f"] == "trace" and prov["layers"]["embedding"]["i"].startswith("trace; B split")
    assert trace["profiler_overhead_s_per_event"] == {}  # no calibration in the trace: nothing taken out
    assert prov["layers"]["head"]["act_bytes"] == "analytical" and prov["pairs"]["gqa+moe / gqa+moe"] == "trace"
    assert table.scale == 0.05 and table.model == "qwen3-30b-a3b" and table.seq_len == 128
    assert moe.act_bytes > 0 and moe.flops > 0 and len(table.layers) == 50


def _one_line_error(result, pattern: str) -> None:
    import re

    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.err, result.err
    assert re.search(pattern, lines[0]), lines[0]


def test_bad_trace_folders_refused(tmp_path, ppplan):
    (tmp_path / "empty").mkdir()
    _one_line_error(ppplan("profile", "--from-trace", str(tmp_path / "empty")), r"--from-trace: .* holds no \.json")
    _one_line_error(ppplan("profile", "--from-trace", str(tmp_path / "nowhere")), r"is not a folder")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"hidden_size": 4}')
    _one_line_error(ppplan("profile", "--from-trace", str(tmp_path / "other")), r"not a PyTorch profiler trace")
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "rank-0.json.gz").write_text("plain text")
    _one_line_error(ppplan("profile", "--from-trace", str(tmp_path / "gz")), r"is not gzip")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "t.json").write_text(json.dumps({"traceEvents": [_x("aten::mm", 0, 5, cat="cpu_op")]}))
    _one_line_error(ppplan("profile", "--from-trace", str(tmp_path / "bare"), "--model", "qwen3-30b-a3b"),
                    r"no ppplan/<F\|I\|W\|B>/<layer>/<type> ranges")
    _one_line_error(ppplan("profile", "--from-trace", str(tmp_path / "bare")), r"--model: the traces do not name")
    _write_trace(tmp_path / "wrong", 0)
    _one_line_error(ppplan("profile", "--from-trace", str(tmp_path / "wrong"), "--model", "llama3-8b"),
                    r"layer type 'embedding'|layer type 'gqa\+moe' of the trace is not one of the model's")
    assert not (tmp_path / "profile.json").exists()


def test_hta_trace_overlap_equals_hta(tmp_path):
    """HTA's test trace (a GPU run, NCCL kernels beside compute): the comm/compute overlap of
    rank 0 is the 11.81% HTA's ``get_comm_comp_overlap`` reports for it."""
    pytest.importorskip("hta", reason="the trace extra (HolisticTraceAnalysis) classifies GPU kernels")
    from profiler.trace.attribute import rank_facts
    from profiler.trace.read import read_trace

    facts = rank_facts(read_trace(HTA_TRACE, 0))
    assert facts.clock == "device" and facts.work == ()
    assert round(100 * facts.comm_comp_overlap, 2) == 11.81
    shutil.copy(HTA_TRACE, tmp_path / "rank-0.json.gz")
    from hta.trace_analysis import TraceAnalysis

    hta = TraceAnalysis(trace_dir=str(tmp_path)).get_comm_comp_overlap(visualize=False)
    assert round(100 * facts.comm_comp_overlap, 2) == float(hta.iloc[0]["comp_comm_overlap_pctg"])


def test_device_clock_attributes_kernels_by_launch_correlation():
    """A GPU trace: a range owns the kernels launched inside it (CUDA runtime event and kernel
    share a ``correlation``), split by HTA's classifier into compute and communication; the
    hidden part is the communication under any compute kernel of the rank."""
    pytest.importorskip("hta", reason="the trace extra (HolisticTraceAnalysis) classifies GPU kernels")
    from profiler.trace.attribute import rank_facts
    from profiler.trace.read import Event, RankTrace

    def launch(ts, corr):
        return Event(name="cudaLaunchKernel", cat="cuda_runtime", ts=ts, dur=2, pid=7, tid=3, correlation=corr)

    def kernel(name, ts, dur, corr, stream=7):
        return Event(name=name, cat="kernel", ts=ts, dur=dur, pid=0, tid=stream, correlation=corr, stream=stream)

    nccl = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
    events = (Event(name=layer_range("F", 1, "gqa+moe"), cat="user_annotation", ts=0, dur=100, pid=7, tid=1),
              launch(10, 1), launch(20, 2), launch(30, 3), launch(500, 4),
              kernel("sm90_gemm_bf16", 100, 50, 1), kernel(nccl, 120, 60, 2, stream=20),
              kernel("elementwise_kernel", 160, 20, 3), kernel("sm90_gemm_bf16", 600, 40, 4))
    facts = rank_facts(RankTrace(path="t", rank=0, events=events))
    (sample,) = facts.work
    assert facts.clock == "device"
    assert sample.compute_s == pytest.approx(70e-6)   # [100, 150] and [160, 180]
    assert sample.a2a_s == pytest.approx(60e-6)       # the NCCL kernel [120, 180]
    assert sample.hidden_s == pytest.approx(50e-6)    # under [120, 150] and [160, 180]
    assert facts.comm_comp_overlap == pytest.approx(50 / 60)


def test_replay_torch_profile_must_be_a_folder(tmp_path, ppplan):
    """``ppplan replay --torch-profile`` names a folder of traces: a file there is refused in one
    line before any process starts, and with --calibrate (one plan's steps only) too."""
    plan_file = tmp_path / "p.json"
    assert ppplan("plan", "llama3-8b", "--pp", "2", "--work", "0.3", "--out", str(plan_file), "--quiet").code == 0
    (tmp_path / "afile").write_text("")
    _one_line_error(ppplan("replay", str(plan_file), "--torch-profile", str(tmp_path / "afile")),
                    r"--torch-profile.*is a file")
    _one_line_error(ppplan("replay", str(plan_file), "--torch-profile", str(tmp_path / "t"), "--calibrate"),
                    r"--torch-profile records one plan's steps")
    assert not (tmp_path / "t").exists()


def _ops(t0: float, n: int, span: float, tid: int = 1) -> list[dict]:
    """``n`` operator events spread over ``span`` microseconds from ``t0``."""
    return [_x("aten::mm", t0 + k * span / n, span / n / 2, tid=tid, cat="cpu_op") for k in range(n)]


def test_host_clock_takes_out_the_profilers_measured_cost():
    """The recorder's calibration (``profiler.trace.overhead``): 5 ranges of the block, the
    best 1000 us with 100 events, the block 800 us unprofiled, so one event costs 2 us; a
    forward of 1000 us holding 39 operator events and a 200 us all-to-all (10 events inside)
    is 800 - 2 x 39 us of compute and 200 - 2 x 11 us of all-to-all (the range's own event
    counts with it). A trace without the calibration keeps its raw times."""
    from profiler.trace.attribute import rank_facts
    from profiler.trace.names import CALIBRATION_RANGE
    from profiler.trace.read import Event, RankTrace

    ev = []
    for k, dur in enumerate((1300, 1000, 1100, 1200, 1050)):
        t = 10_000 * k
        ev += [_x(CALIBRATION_RANGE, t, dur)] + _ops(t + 1, 100, dur - 2)
    t = 100_000
    ev += [_x(layer_range("F", 1, "gqa+moe"), t, 1000)] + _ops(t + 1, 19, 298)
    ev += [_x(a2a_range("dispatch"), t + 300, 200)] + _ops(t + 301, 10, 198) + _ops(t + 501, 20, 498)
    events = tuple(Event(name=e["name"], cat=e["cat"], ts=e["ts"], dur=e["dur"], pid=7, tid=1) for e in ev)
    run = dict(RUN, calibration={"unprofiled_s": 800e-6, "repeats": 5})
    facts = rank_facts(RankTrace(path="t", rank=0, events=events, run=run))
    assert facts.overhead_s_per_event == pytest.approx(2e-6)
    (f,) = facts.work
    assert f.compute_s == pytest.approx((800 - 2 * 39) * 1e-6) and f.a2a_s == pytest.approx((200 - 2 * 11) * 1e-6)
    raw = rank_facts(RankTrace(path="t", rank=0, events=events, run=RUN))
    assert raw.overhead_s_per_event is None and raw.work[0].compute_s == pytest.approx(800e-6)


def test_trace_import_benchmark_compares_the_median_of_its_rounds():
    """``benchmarks/trace_import.py --rounds K``: each side's field is the median of its rounds
    (one slow round on either side moves nothing), and each side's spread is largest / smallest."""
    from tests.benchmark_modules import load_benchmark

    bench = load_benchmark("trace_import", "trace_import_rounds")
    zero = {k: 0.0 for k in bench._FIELDS}

    def table(f: float) -> dict:
        return {"gqa+moe": {**zero, "f": f}}

    prov = {"gqa+moe": {k: "trace" for k in bench._FIELDS}}
    rows = bench.compare_rounds([table(0.010), table(0.030), table(0.011)],
                                [table(0.0105), table(0.0100), table(0.002)], prov)
    f = next(r for r in rows if r["field"] == "f")
    assert (f["trace_ms"], f["profile_ms"]) == (11.0, 10.0)
    assert f["ratio"] == 1.1 and f["within_target"]
    assert f["trace_spread"] == 3.0 and f["profile_spread"] == 5.25
    assert f["trace_rounds_ms"] == [10.0, 30.0, 11.0]
    one = bench.compare_rounds([table(0.012)], [table(0.010)], prov)
    f1 = next(r for r in one if r["field"] == "f")
    assert f1["ratio"] == 1.2 and not f1["within_target"] and "trace_spread" not in f1


def test_trace_import_benchmark_profiles_alone_beside_the_default(monkeypatch, tmp_path):
    """``--also-alone``: the reference profile runs ``ppplan profile --alone`` to ``PA<r>.json``
    beside the default (both processes measuring) to ``P<r>.json``."""
    from tests.benchmark_modules import load_benchmark

    bench = load_benchmark("trace_import", "trace_import_alone")
    calls = []
    monkeypatch.setattr(bench, "_ppplan", lambda cwd, *args, **kw: calls.append(args) or 0.0)
    prof = dict(model="qwen3-30b-a3b", scale=0.03, ep=1, shape=["--seq-len", "64"], micro_batch=4, repeats=9)
    bench._profile(tmp_path, 2, **prof)
    bench._profile(tmp_path, 2, **prof, alone=True, out="PA")
    default, alone = calls
    assert "--alone" not in default and default[-2:] == ("--out", "P2.json")
    assert "--alone" in alone and alone[-2:] == ("--out", "PA2.json")


def _fake_loop(bench, monkeypatch, calls: list) -> None:
    """``cpu_figures`` without processes: each ``ppplan`` call recorded, the profiles and the
    plan written as the files the loop reads, each round's replay a fixed trace table equal to
    the reference profile (the one-group profile's F is twice as long)."""
    fields = {k: 1e-3 for k in bench._FIELDS}
    table = {"layers": [{"type": "gqa+moe", **fields}]}

    def ppplan(cwd, *args, **kwargs):
        calls.append(args)
        name = args[args.index("--out") + 1]
        one_group = {"layers": [dict(table["layers"][0], f=2e-3)]}  # the one-group profile's F twice the trace's
        (Path(cwd) / name).write_text(json.dumps({"microbatches": {"size": 4}} if args[0] == "plan" else
                                                 one_group if name.startswith("PG") else table))
        return 0.0

    trace = dict(table, meta={"trace": {"provenance": {"layers": {"gqa+moe": {k: "trace" for k in fields}}},
                                        "samples": {}, "hidden_share": {}}})
    facts = {"walls_s": {}, "replay_step_ms": 1.0, "trace_busy_share": {}}
    monkeypatch.setattr(bench, "_ppplan", ppplan)
    monkeypatch.setattr(bench, "_loop_round", lambda work, r, **kw: (dict(facts), trace))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ep, groups", [(1, 1), (2, 2)])
def test_trace_import_benchmark_profiles_one_group_per_stage_at_ep_above_1(monkeypatch, ep, groups):
    """At pp 2 x ep 2 the reference profile runs ``--groups 2`` (the replay's four processes at
    once); at ep 1 the command it ran before (no ``--groups``: its two processes already
    measure at once). The JSON records the groups; ``--also-one-group`` adds the one-group
    profile to ``PG<r>.json`` each round and compares the trace with it (``rows_one_group``)."""
    from tests.benchmark_modules import load_benchmark

    bench = load_benchmark("trace_import", "trace_import_groups")
    calls: list = []
    _fake_loop(bench, monkeypatch, calls)
    out = bench.cpu_figures(model="qwen3-30b-a3b", scale=0.03, ep=ep, steps=1, seq_len=64, microbatches=4,
                            micro_batch=4, rounds=2, also_one_group=ep > 1)
    assert bench.profile_groups(ep) == groups and out["groups"] == groups
    profiles = [a for a in calls if a[0] == "profile"]
    reference = [a for a in profiles if a[-1][1].isdigit()]
    assert [a[-1] for a in reference] == ["P0.json", "P1.json"]
    if ep == 1:
        assert all("--groups" not in a for a in profiles) and "rows_one_group" not in out
    else:
        assert all(a[a.index("--groups") + 1] == "2" for a in reference)
        one = [a for a in profiles if a[-1].startswith("PG")]
        assert [a[-1] for a in one] == ["PG0.json", "PG1.json"] and all("--groups" not in a for a in one)
        f = next(r for r in out["rows_one_group"] if r["field"] == "f")
        assert f["ratio"] == 0.5 and (out["within_target"], out["within_target_one_group"]) == (6, 5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", [["--ep", "2", "--also-alone"], ["--also-one-group"]])
def test_trace_import_benchmark_refuses_a_second_profile_that_means_nothing(argv, capsys):
    """``--alone`` has no meaning where every rank of a group measures, and at ep 1 there is no
    one-group profile to add: both refused before anything runs."""
    from tests.benchmark_modules import load_benchmark

    bench = load_benchmark("trace_import", "trace_import_refuse")
    with pytest.raises(SystemExit) as exc:
        bench.main(["--only", "cpu", *argv])
    assert exc.value.code == 2 and "--also-" in capsys.readouterr().err
