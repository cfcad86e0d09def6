"""Claims of docs/trace-import.md (costs from PyTorch profiler traces)."""

from __future__ import annotations

from claim_kit import Claim, Exact, Page, Stale

__all__ = ["CLAIMS"]

_TI = "docs/trace-import.md"
HTA = "python benchmarks/trace_import.py --json --only hta"
CPU_LOOP = "python benchmarks/trace_import.py --json --only cpu"

CLAIMS = [
    Claim(id="trace-hta-overlap", where="HTA's test trace: the importer's comm/compute overlap and HTA's own",
          command=HTA,
          figure=Page(path=_TI, pattern=r"the importer reads ([\d.]+)% of its communication time overlapped\s+by "
                                        r"computation, and HTA's own `get_comm_comp_overlap` reports ([\d.]+)%"),
          measured=lambda run: (run.json()["hta"]["overlap_pct"], run.json()["hta"]["hta_overlap_pct"]),
          compare=Exact()),
    Claim(id="trace-cpu-loop", where="the CPU loop's per-type table, trace against profile",
          command=CPU_LOOP,
          figure=Page(path=_TI, pattern=r"^\*\*The CPU loop\.\*\* Run on (\d{4}-\d\d-\d\d) \d\d:\d\d UTC"),
          stale=Stale(why="CPU timings of two processes on a shared two-core machine (about 2 min): the ratios move "
                          "with the machine's load, the page gives the run's date and load",
                      date=Page(path=_TI, pattern=r"^\*\*The CPU loop\.\*\* Run on (\d{4}-\d\d-\d\d) \d\d:\d\d UTC"))),
    Claim(id="trace-cpu-loop-ep2", where="the pp 2 x ep 2 loop: hidden shares and fields within target",
          command=CPU_LOOP + " --ep 2",
          figure=Page(path=_TI, pattern=r"^With `--ep 2` \(pp 2 x ep 2, four processes on two cores; run on "
                                        r"(\d{4}-\d\d-\d\d) \d\d:\d\d UTC"),
          stale=Stale(why="CPU timings of four processes on a shared two-core machine (about 7 min for both "
                          "schedules): the ratios move with the machine's load",
                      date=Page(path=_TI, pattern=r"^With `--ep 2` \(pp 2 x ep 2, four processes on two cores; run "
                                                  r"on (\d{4}-\d\d-\d\d) \d\d:\d\d UTC"))),
]
