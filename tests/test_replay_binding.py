"""Replay ranks on cores of their own (``planner.replay.device``) and the garbage
collector held off during timed steps (``profiler.timing``)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref

import pytest

from planner.replay.device import bind_rank
from profiler.timing import collector_off

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity")


def _in_child(code: str) -> str:
    """Run ``code`` in a fresh interpreter (binding this test process would bind pytest)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def test_each_rank_gets_its_own_cores_when_there_are_enough():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 cores")
    code = ("import os; from planner.replay.device import bind_rank; "
            "print(bind_rank({r}, 2, 1), sorted(os.sched_getaffinity(0)))")
    for r in (0, 1):
        said = _in_child(code.format(r=r))
        assert said == f"bound to cores {cpus[r]} [{cpus[r]}]"


def test_too_few_cores_binds_nothing_and_says_why():
    before = os.sched_getaffinity(0)
    n = len(before)
    said = bind_rank(0, n + 1, 1)
    assert said.startswith(f"not bound: {n + 1} ranks x 1 thread(s) > {n} available cores")
    assert os.sched_getaffinity(0) == before


def test_collector_is_off_inside_the_block_and_cycles_are_gone_after_it():
    class Node:
        pass

    assert gc.isenabled()
    with collector_off():
        assert not gc.isenabled()
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        alive = weakref.ref(a)
        del a, b
    assert gc.isenabled()
    assert alive() is None
