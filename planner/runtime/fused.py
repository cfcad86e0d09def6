"""The ``OVERLAP_F_B`` action: forward of one microbatch beside the backward of another.

torch's ``_PipelineScheduleRuntime`` runs the two halves of an ``OVERLAP_F_B`` one after
the other unless a function is registered for it
(``register_custom_function(OVERLAP_F_B, fn)``, torch/distributed/pipelining/
schedules.py). ``overlap_f_b`` is that function: it does the bookkeeping torch's own
action loop does for each half (``_prepare_forward``, ``_prepare_backward``) and then
runs the two concurrently (``baton.run_pair``): the backward in a helper thread, the
forward here, taking turns at every expert-parallel all-to-all (see [Note: comm points]
in ``profiler.layers.program``), in Megatron's combined-1F1B order. Sends stay separate
actions of the lowered schedule. The halves may sit on one stage or on two stages of
this rank, in either order.
"""

from __future__ import annotations

from typing import Any

from planner.runtime.baton import run_pair
from planner.runtime.trace import PairTrace

__all__ = ["overlap_f_b", "split_pair"]


def split_pair(action: Any) -> tuple[Any, Any]:
    """(forward, backward) sub-actions of an ``OVERLAP_F_B`` action."""
    from torch.distributed.pipelining.schedules import BACKWARD_INPUT, FORWARD, FULL_BACKWARD

    subs = list(action.sub_actions or ())
    fwd = [a for a in subs if a.computation_type == FORWARD]
    bwd = [a for a in subs if a.computation_type in (FULL_BACKWARD, BACKWARD_INPUT)]
    if len(subs) != 2 or len(fwd) != 1 or len(bwd) != 1:
        raise ValueError(f"{action} is not one forward and one backward (B or I): "
                         "the overlap runtime fuses exactly that pair")
    return fwd[0], bwd[0]


def _prepare_forward(rt: Any, stages: dict[int, Any], act: Any, ctx: Any):
    """The forward half, with the bookkeeping torch's own action loop does
    (``_PipelineScheduleRuntime._step_microbatches``, ``_perform_action``):

    Forward: wait for the stage input's receive (unless the stage is first, or the previous
    stage sits on this rank: [Note: V-schedule special case] in torch), run
    ``forward_one_chunk``, compute the loss on the last stage, and hand the output to the
    next stage when it is on this rank.
    """
    from torch.distributed.pipelining.schedules import _wait_batch_p2p

    s, mb = act.stage_index, act.microbatch_index
    stage = stages[s]
    rt._assert_unsharded(stage)
    if not stage.is_first and s - 1 not in stages:
        if (s, mb) not in rt.fwd_recv_ops:
            raise AssertionError(f"Computing {act} before receiving input")
        _wait_batch_p2p(rt.fwd_recv_ops.pop((s, mb)))

    def run() -> None:
        output = stage.forward_one_chunk(mb, ctx.arg_mbs[mb], ctx.kwarg_mbs[mb])
        rt._maybe_compute_loss(stage, output, ctx.target_mbs, mb)
        if s + 1 in stages:
            stages[s + 1].set_local_fwd_input(output, mb)
    return run


def _prepare_backward(rt: Any, stages: dict[int, Any], act: Any):
    """The backward half, with torch's own bookkeeping (as ``_prepare_forward``):

    Backward (full B, or input-gradient I): wait for the output gradient's receive (unless
    the stage is last, or the next stage sits on this rank), take the loss on the last
    stage, count full backwards (the last one releases the data-parallel gradient sync), run
    ``backward_one_chunk``, and hand the input gradient to the previous stage when it is on
    this rank.
    """
    from torch.distributed.pipelining.schedules import FULL_BACKWARD, _wait_batch_p2p

    s, mb = act.stage_index, act.microbatch_index
    stage = stages[s]
    rt._assert_unsharded(stage)
    if not stage.is_last and s + 1 not in stages:
        if (s, mb) not in rt.bwd_recv_ops:
            raise AssertionError(f"Attempted to run compute {act} before receiving input")
        _wait_batch_p2p(rt.bwd_recv_ops.pop((s, mb)))
    loss = rt._maybe_get_loss(stage, mb)
    full = act.computation_type == FULL_BACKWARD
    last = False
    if full:
        rt.backward_counter[s] += 1
        last = rt.backward_counter[s] == rt._n_microbatches

    def run() -> None:
        stage.backward_one_chunk(mb, loss=loss, full_backward=full, last_backward=last)
        if s - 1 in stages:
            stages[s - 1].set_local_bwd_input(stage.get_local_bwd_output(mb), mb)
    return run


def overlap_f_b(action: Any, ctx: Any, *, timeout_s: float = 600.0, traces: list[PairTrace] | None = None) -> None:
    """Run an ``OVERLAP_F_B`` action with its halves overlapped (the registered function).

    ``timeout_s`` bounds how long one half waits for the other to hand over; a rank
    that died is caught sooner by the collective timeout of the pending exchange.
    ``traces``, when given, gets one ``PairTrace`` per pair run ([Note: overlap trace]).
    Per MoE layer the turns fall in Megatron's combined-1F1B order: backward post-MoE +
    combine, forward attention + routing, backward experts + dispatch, forward dispatch,
    backward attention, forward experts, forward combine, ...
    """
    from profiler.layers.program import set_wait_hook

    rt = ctx.schedule_ref
    stages = {st.stage_index: st for st in rt._stages}
    f_act, b_act = split_pair(action)
    # both receives are waited for before the pair starts, as the sequential loop would
    forward = _prepare_forward(rt, stages, f_act, ctx)
    backward = _prepare_backward(rt, stages, b_act)
    trace = None
    if traces is not None:
        trace = PairTrace()
        traces.append(trace)
    run_pair(forward, backward, timeout_s=timeout_s, install=set_wait_hook, trace=trace)
