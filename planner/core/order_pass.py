"""The simulator's one timing kernel: run each rank's nodes in order as their dependencies end.

One pass gives a topological order, the start and end of every node and, when the ranks
cannot all finish, where each one stopped (``planner.core.compiled.run_in_order``
prepares the input from a compiled schedule and reads the result). The first timing of a
schedule (``simulate``), every re-timing (``simulate_compiled``), the steady state's
repeated steps (``planner.core.steady``) and compiling (zero durations) all run it. Plain
lists of Python ints and floats, one loop unrolled over three dependency slots: this is
where a simulation spends most of its time.

[Note: waiting ranks] The ranks run from a stack (rank 0 first). A rank runs until a
dependency has not ended (its ``end`` is None), then waits for it: ``waiting[d]`` is
the one rank waiting for node d, or the list of them when several do (rare; a list for
every wait made this pass a third slower). When d ends they are pushed back on the
stack in the order they began to wait.
"""

from __future__ import annotations

__all__ = ["order_and_time"]


def order_and_time(first: list[int], stop: list[int], cols: list[list[int]], gaps: list[list[float]],
                   dur: list[float], topo: list[int], ready: list[float] | None = None
                   ) -> tuple[list[float], list[float | None], list[int]]:
    """Run ranks whose nodes are ``first[r]:stop[r]``, appending the nodes to ``topo`` as they
    run; returns start, end (None for a node never run; the sentinel's 0.0 last) and the
    next node of each rank (``stop[r]`` when it finished). Rank r's first node starts no
    earlier than ``ready[r]`` (default 0: an empty pipeline).

    ``cols`` are 1 to 3 columns of the dependencies each node may wait for (the sentinel
    ``len(dur)`` where a slot is empty, empty slots last), ``gaps`` the delay added to
    the end of each, ``dur`` each node's duration. A node starts when its rank
    predecessor and every dependency (plus its gap) have ended.
    """
    sentinel = len(dur)
    c0, c1, c2 = cols + [[sentinel] * sentinel] * (3 - len(cols))
    g0, g1, g2 = gaps + [gaps[0]] * (3 - len(gaps))  # never read for an empty slot
    start = [0.0] * sentinel
    end: list[float | None] = [None] * sentinel + [0.0]
    waiting: list = [None] * (sentinel + 1)
    pos = list(first)
    ready = ready or [0.0] * len(first)
    push = topo.append
    stack = list(range(len(first) - 1, -1, -1))
    while stack:
        r = stack.pop()
        n, hi = pos[r], stop[r]
        t = end[n - 1] if n > first[r] else ready[r]  # t may rise before n blocks: n's rerun resets it
        while n < hi:
            d = c0[n]
            x = end[d]
            if x is None:
                break
            x += g0[n]
            if x > t:
                t = x
            d = c1[n]
            if d != sentinel:
                x = end[d]
                if x is None:
                    break
                x += g1[n]
                if x > t:
                    t = x
                d = c2[n]
                if d != sentinel:
                    x = end[d]
                    if x is None:
                        break
                    x += g2[n]
                    if x > t:
                        t = x
            start[n] = t
            t += dur[n]
            end[n] = t
            push(n)
            w = waiting[n]
            if w is not None:
                if w.__class__ is int:
                    stack.append(w)
                else:
                    stack.extend(w)
            n += 1
        else:
            pos[r] = n
            continue
        pos[r] = n
        w = waiting[d]
        if w is None:
            waiting[d] = r
        elif w.__class__ is int:
            waiting[d] = [w, r]
        else:
            w.append(r)
    return start, end, pos
