"""The overlap runtime (planner.runtime) computes what sequential execution computes.

Two gloo processes run fused-pair schedules from the planner's generators, once with
torch's own loop (halves one after the other) and once with ``planner.runtime.attach``
(halves concurrent, taking turns at every all-to-all), for (F;B) and (F;I) pairs, loop
and V placement, pairs on one stage and on two stages of a rank, and every recompute
mode; losses and gradients must match each other and a single-process reference.
Pipeline cases: pp 2 with an emulated expert-parallel link (comm points without a
second EP rank). Expert-parallel case: pp 1 x ep 2, real gloo all-to-alls.

Equal numbers do not show that the halves overlapped (run one after the other, they
compute the same), so every fused pair also records its overlap trace
(``planner.runtime.trace``): each exchange either half issues while the other still
runs must hold a whole compute segment of the other half inside its window. That is
an order of events, not a duration, so it does not depend on the machine's load.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

import runtime_helpers as h  # noqa: E402  (same tests folder)

pytestmark = pytest.mark.slow

RTOL, ATOL = 1e-4, 1e-6
"""Fused against sequential: the same arithmetic per half, so only summation order differs."""
REF_RTOL, REF_ATOL = 1e-3, 1e-5
"""Against the single process: whole-model autograd and data-parallel sums add in other orders."""


def _i_to_b(schedule: dict) -> dict:
    """The same order with every I a full B and the W tasks dropped."""
    from planner.core.schedule import Action, parse_action

    def conv(a):
        if a.sub:
            return Action.fused(*(conv(p) for p in a.sub))
        return parse_action(f"{a.stage}B{a.microbatch}") if a.kind == "I" else a
    return {r: [conv(a) for a in acts if a.kind != "W"] for r, acts in schedule.items()}


def _pipeline_cases() -> list[dict]:
    from solvers.schedule.families.dualpipev_list import dualpipev_list
    from solvers.schedule.families.generators import interleaved_1f1b, one_f_one_b

    shapes = {
        "loop-FB": (one_f_one_b(2, 4, fuse=True), [0, 1]),
        "loop-FI": (one_f_one_b(2, 4, split_w=True, fuse=True), [0, 1]),
        "interleaved-FB": (interleaved_1f1b(2, 2, 4, fuse=True), [0, 1, 0, 1]),
        "V-FI": (dualpipev_list(2, 4), [0, 1, 1, 0]),
        "V-FB": (_i_to_b(dualpipev_list(2, 4)), [0, 1, 1, 0]),
    }
    cases = []
    for mode in ("none", "selective", "full"):
        for name, (sched, ranks) in shapes.items():
            if mode != "none" and name == "interleaved-FB":
                continue  # loop placement with recomputation is covered by loop-FB / loop-FI
            cases.append({"name": f"{name}-{mode}", "schedule": sched, "stage_ranks": ranks, "recompute": mode})
    return cases


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(cases: list[dict], tmp, ep: int) -> list[list[dict]]:
    ctx = mp.get_context("spawn")
    port = _port()
    procs = [ctx.Process(target=h.run_cases, args=(r, 2, port, cases, str(tmp), ep)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=500)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    return [torch.load(tmp / f"rank{r}.pt") for r in range(2)]


def _merged(per_rank: list[dict], key: str) -> tuple[list[float], dict]:
    losses, grads = [], {}
    for r in per_rank:
        losses += r[key][0]
        grads.update(r[key][1])
    return losses, grads


def _assert_overlapped(schedule: dict, per_rank: list[dict]) -> None:
    """Every fused pair of a pipeline rank's schedule ran with each half's exchanges hidden
    behind the other half's compute ([Note: overlap trace]): none exposed, and some of each
    half's checked unless every pair is a stage-0 (F;I), whose I computes nothing (token
    ids have no gradient; W does that work) and so exchanges nothing; the sequential run
    traced nothing."""
    from planner.core.schedule import OVERLAP, ActionKind
    from planner.runtime.trace import PairTrace

    checked = {"F": 0, "B": 0}
    overlappable = any(a.sub[1].stage != 0 or a.sub[1].kind == ActionKind.B
                       for acts in schedule.values() for a in acts if a.kind == OVERLAP)
    for r, per in enumerate(per_rank):
        assert per["sequential"][2] == []
        pairs = [a for a in schedule[r] if a.kind == OVERLAP]
        traces = [PairTrace.from_rows(rows) for rows in per["fused"][2]]
        assert len(traces) == len(pairs), (r, len(traces), len(pairs))
        for pair, trace in zip(pairs, traces):
            for party in checked:
                assert trace.exposed(party) == [], (r, str(pair), party, trace.to_rows())
                checked[party] += len(trace.overlappable(party))
    assert all(checked.values()) or not overlappable, checked


def _close(grads: dict, ref: dict, rtol: float = RTOL, atol: float = ATOL) -> None:
    assert set(grads) == set(ref)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref[name], rtol=rtol, atol=atol, msg=name)


CASES = _pipeline_cases()


@pytest.fixture(scope="module")
def pipeline_results(tmp_path_factory):
    return _spawn(CASES, tmp_path_factory.mktemp("pp"), ep=1)


@pytest.fixture(scope="module")
def references():
    return {mode: h.reference(mode) for mode in ("none", "selective", "full")}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("k", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_fused_pair_matches_sequential_and_reference(k, pipeline_results, references):
    per_rank = [r[k] for r in pipeline_results]
    seq_losses, seq_grads = _merged(per_rank, "sequential")
    fus_losses, fus_grads = _merged(per_rank, "fused")
    ref_losses, ref_grads = references[CASES[k]["recompute"]]
    assert len(fus_losses) == h.MICROBATCHES
    assert fus_losses == pytest.approx(seq_losses, rel=1e-6)
    assert fus_losses == pytest.approx(ref_losses, rel=1e-5)
    _close(fus_grads, seq_grads)
    _close(fus_grads, ref_grads, REF_RTOL, REF_ATOL)
    _assert_overlapped(CASES[k]["schedule"], per_rank)


@pytest.mark.timeout(600)
def test_fused_pair_with_real_expert_parallel_all_to_all(tmp_path):
    from solvers.schedule.families.generators import one_f_one_b

    cases = [{"name": "ep2-FB", "schedule": one_f_one_b(1, 4, fuse=True), "stage_ranks": [0], "recompute": "none"},
             {"name": "ep2-FI-full", "schedule": one_f_one_b(1, 4, split_w=True, fuse=True), "stage_ranks": [0],
              "recompute": "full"}]
    results = _spawn(cases, tmp_path, ep=2)
    for k, case in enumerate(cases):
        ref_losses, ref = h.reference(case["recompute"], ep=2)
        for r, per in enumerate(results):
            seq, fus = per[k]["sequential"], per[k]["fused"]
            assert fus[0] == pytest.approx(seq[0], rel=1e-6)
            assert fus[0] == pytest.approx(ref_losses[r * h.MICROBATCHES:(r + 1) * h.MICROBATCHES], rel=1e-5)
            local = {}
            for name, g in ref.items():
                if ".moe.w_" in name:
                    n = g.shape[0] // 2
                    g = g[r * n:(r + 1) * n]
                local[name] = g
            _close(fus[1], seq[1])
            _close(fus[1], local, REF_RTOL, REF_ATOL)
            _assert_overlapped(case["schedule"], [per[k]])  # each EP rank runs pipeline rank 0
