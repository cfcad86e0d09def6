"""Option types and help texts of ``ppplan plan`` that read from the data or need more than a range.

``--memory-limit``'s microbatch unit was ``4mb``, which reads as four megabytes; it is now
``4microbatches``. The old spelling still works and prints one deprecation line on stderr
once the command has succeeded (a refused command prints its one error line only).
The library (``solvers.schedule.engines.memory_limit.parse_memory_limit``) still takes ``4mb``: this
type turns the new spelling into it, after range checks the library does not make.
"""

from __future__ import annotations

import math
import re

import click

from planner.cli.common import defer_warning
from planner.core.hardware import GPU_PRESETS
from planner.core.limits import MAX_STAGE_MICROBATCHES

__all__ = ["GPU_HELP", "MemoryLimit", "Deadline", "MEMORY_LIMIT_HELP", "LAYOUT_HELP"]

GPU_HELP = f"GPU preset replacing the cluster's: {', '.join(sorted(GPU_PRESETS))}."
"""``--gpu``'s help, listing the presets of ``planner.core.hardware.GPU_PRESETS``."""

MEMORY_LIMIT_HELP = ("Memory limit: bytes per GPU (8.5e10, 80GiB, 80GB) or microbatches' worth of activations "
                     "per rank (4microbatches; the old spelling 4mb still works).")

LAYOUT_HELP = ("Your own partition, to compare: a Megatron --pipeline-model-parallel-layout string "
               "('Et*3|(tt|)*29,m|L': stage i on rank i % pp) or decoder layers per stage ('4,8,8,4'; the "
               "embedding goes on the first stage, MTP and the loss on the last). ppplan plans it (schedule, W "
               "placement, recomputation chosen for it) beside its own free plan and reports both: the plan "
               "written is ppplan's, with yours as the user_layout baseline (see --keep-layout). pp x vpp = the "
               "layout's stages: with neither --pp nor --vpp, pp is the cluster's and vpp = stages / pp; with one "
               "of them, the other follows. Takes about twice the planning time.")
"""``--layout``'s help (the rules: ``planner.core.layout_text``, ``planner.planning.user_layout``)."""

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_MICROBATCHES = re.compile(rf"^\s*{_NUMBER}\s*(microbatches|microbatch)\s*$", re.IGNORECASE | re.ASCII)
_OLD = re.compile(rf"^\s*{_NUMBER}\s*mb\s*$", re.ASCII)


class MemoryLimit(click.ParamType):
    """Bytes per GPU, or ``N microbatches`` (old spelling ``Nmb``), as the library's text."""

    name = "LIMIT"

    def convert(self, value, param, ctx):  # noqa: D102 - click's hook
        if not value.isascii():
            self.fail(f"{value!r} has non-ASCII characters; write digits 0-9, e.g. 80GiB or 4microbatches",
                      param, ctx)
        new, old = _MICROBATCHES.match(value), _OLD.match(value)
        match = new or old
        if match is None:
            return value  # bytes: the library reads and checks them
        count = float(match.group(1))
        if not math.isfinite(count) or count > MAX_STAGE_MICROBATCHES:
            self.fail(f"{value!r} is more microbatches in flight than the planner's limit of "
                      f"{MAX_STAGE_MICROBATCHES}", param, ctx)
        if new is not None and count < 1:
            self.fail(f"{value!r} is below one microbatch in flight per stage; use at least 1microbatches",
                      param, ctx)
        if old is not None and count >= 1:  # below 1 the library refuses it, in one line
            defer_warning(ctx, f"--memory-limit {value.strip()}: the unit mb is deprecated (it reads as "
                               f"megabytes); write {match.group(1)}microbatches")
        return f"{match.group(1)}mb"


class Deadline(click.ParamType):
    """``TASK=SECONDS`` in ASCII (``float()`` would read Arabic-Indic digits as 0-9)."""

    name = "TASK=S"

    def convert(self, value, param, ctx):  # noqa: D102 - click's hook
        if not value.isascii():
            self.fail(f"{value!r} has non-ASCII characters; write digits 0-9, e.g. 0W3=0.8", param, ctx)
        return value
