"""Claims of docs/trace-import.md (costs from PyTorch profiler traces)."""

from __future__ import annotations

from claim_kit import Claim, Exact, Page
from claim_outputs import history

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
    history("trace-cpu-loop", _TI, "the CPU loop's per-type table, trace against profile", "",
            r"^\*\*The CPU loop\.\*\* Run on (\d{4}-\d\d-\d\d) \d\d:\d\d UTC", command=CPU_LOOP,
            why="CPU timings of two processes on a shared two-core machine (about 2 min): the ratios move "
                "with the machine's load, the page gives the run's date and load"),
    history("trace-cpu-loop-rounds", _TI, "the CPU loop in rounds: each side's spread and the medians' ratio", "",
            r"Run on (\d{4}-\d\d-\d\d) 19:05 UTC and 20:11 UTC",
            command=CPU_LOOP + " --rounds 3 --steps 4 --repeats 30",
            why="CPU timings of two processes on a shared two-core machine, three rounds (about 9 min): the "
                "ratios move with the machine's load, the page gives the runs' dates and load"),
    history("trace-cpu-loop-alone", _TI, "the CPU loop: the pooled profile and the --alone one against the trace", "",
            r"Run on (\d{4}-\d\d-\d\d) 23:02 UTC and 23:16 UTC",
            command=CPU_LOOP + " --rounds 3 --steps 4 --repeats 9 --also-alone",
            why="CPU timings of two processes on a shared two-core machine, three rounds with two profiles each "
                "(about 3.5 min): the ratios move with the machine's load, the page gives the runs' dates and load"),
    history("trace-cpu-loop-ep2", _TI, "the pp 2 x ep 2 loop: hidden shares and fields within target", "",
            r"^With `--ep 2` \(pp 2 x ep 2, four processes on two cores; run on (\d{4}-\d\d-\d\d) \d\d:\d\d UTC",
            command=CPU_LOOP + " --ep 2",
            why="CPU timings of four processes on a shared two-core machine (about 7 min for both schedules): "
                "the ratios move with the machine's load"),
    history("trace-cpu-loop-ep2-groups", _TI, "the pp 2 x ep 2 loop: the --groups 2 profile and the one-group one", "",
            r"Run on\s+(\d{4}-\d\d-\d\d) 02:08-02:17 UTC",
            command=CPU_LOOP + " --rounds 3 --steps 4 --repeats 9 --ep 2 --also-one-group",
            why="CPU timings of four processes and then two on a shared two-core machine, three rounds with two "
                "profiles each (about 9 min): the ratios move with the machine's load, the page gives the run's "
                "date and load"),
]
