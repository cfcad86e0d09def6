"""Megatron's ``--pipeline-model-parallel-layout`` text, read and written (the one owner of its grammar).

Grammar (megatron-core ``megatron/core/transformer/pipeline_parallel_layer_layout.py``,
``PipelineParallelLayerLayout.parse_str_to_list``): one letter per layer (E embedding, t decoder,
m MTP, L loss), ``|`` between stages, commas cosmetic; ``(..)*n`` and then ``x*n`` are unrolled by
two regular expressions, in that order (no nesting). Stage i runs as virtual chunk i // pp on
pipeline rank i % pp. ``validate_layer_layout`` then asks: E first and once, L last and once, the
model's decoder and MTP counts, no decoder after an MTP layer, every MTP layer in one stage, that
stage the last chunk of its rank. ppplan also needs every stage to hold a layer.

``--layout`` also takes decoder-layer counts per stage (``4,8,8,4``, in stage order), Megatron's
uniform rule for the rest: the embedding on the first stage, MTP and the loss on the last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from planner.core.errors import InputError

__all__ = ["expand_layout", "layout_stages", "layout_bounds", "mtp_problem", "compress_stage", "join_stages", "LETTERS"]

LETTERS = "EtmL"
"""The layer letters Megatron's grammar knows (``planner.core.model.ROLE_LETTERS``)."""

_UNROLL = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))
"""Megatron's two unrolling patterns, applied in this order."""
_COUNTS = re.compile(r"^\s*[+-]?\d+(\s*,\s*[+-]?\d+)*\s*$", re.ASCII)
"""The decoder-count form: integers separated by commas."""
_MAX_LETTERS = 1_000_000
"""Unrolled length refused beyond this (a typo such as ``t*99999999`` must not fill memory)."""
_FIELD = "--layout"


def expand_layout(text: str) -> list[str]:
    """The layer letters of each stage of a Megatron layout string, unrolled as Megatron does."""
    flat = text.replace(",", "")
    for pattern in _UNROLL:
        grown = [len(flat)]

        def unroll(match: re.Match) -> str:
            grown[0] += len(match.group(1)) * int(match.group(2)) - len(match.group(0))
            if grown[0] > _MAX_LETTERS:
                raise InputError(_FIELD, f"unrolls to more than {_MAX_LETTERS} layers at {match.group(0)!r}",
                                 "check the repetition counts")
            return match.group(1) * int(match.group(2))
        flat = pattern.sub(unroll, flat)
    bad = sorted(set(flat) - set(LETTERS + "|"))
    if bad:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise InputError(_FIELD, f"unknown symbol {bad[0]!r} in {shown!r} after unrolling",
                         "use E, t, m, L, | and commas, (..)*n and x*n")
    return flat.split("|")


def _from_counts(text: str, num_mtp: int) -> list[str]:
    """Stage letters of decoder counts per stage (module doc)."""
    counts = [int(c) for c in text.split(",")]
    negative = [c for c in counts if c < 0]
    if negative:
        raise InputError(_FIELD, f"decoder-layer count {negative[0]} is below 0", "give counts >= 0")
    stages = ["t" * c for c in counts]
    stages[0] = "E" + stages[0]
    stages[-1] += "m" * num_mtp + "L"
    return stages


def layout_stages(text: str, model_layout: str) -> list[str]:
    """Layer letters per stage of ``text`` (a layout string or decoder counts), checked against the
    model's letters (``ModelSpec.layout``) by Megatron's rules and ppplan's (module doc)."""
    counts = bool(_COUNTS.match(text))
    stages = _from_counts(text, model_layout.count("m")) if counts else expand_layout(text)
    flat = "".join(stages)
    n_dec, n_mtp = model_layout.count("t"), model_layout.count("m")
    for letter, name in (("E", "the embedding"), ("L", "the loss head")):
        if flat.count(letter) != 1:
            raise InputError(_FIELD, f"{name} ({letter}) appears {flat.count(letter)} times", "write it once")
    if not flat.startswith("E"):
        raise InputError(_FIELD, "the embedding E must be the first layer of the first stage",
                         "start the layout with E")
    if not flat.endswith("L"):
        raise InputError(_FIELD, "the loss head L must be the last layer of the last stage", "end the layout with L")
    if flat.count("t") != n_dec:
        raise InputError(_FIELD, f"{flat.count('t')} decoder layers, the model has {n_dec}",
                         f"give {n_dec} decoder layers in total")
    if flat.count("m") != n_mtp:
        raise InputError(_FIELD, f"{flat.count('m')} MTP layers (m), the model has {n_mtp}",
                         f"give {n_mtp} m" if n_mtp else "leave m out")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise InputError(_FIELD, "a decoder layer t follows an MTP layer m", "put the MTP layers after every t")
    empty = [s for s, letters in enumerate(stages) if not letters]
    if empty:
        raise InputError(_FIELD, f"stage {empty[0]} holds no layer (ppplan plans non-empty stages)",
                         "give every stage a layer, or use fewer stages")
    return stages


def mtp_problem(stages: Sequence[str], pp: int) -> tuple[str, str] | None:
    """(problem, fix) where the MTP layers break Megatron's rule for ``pp`` ranks (module doc), else None."""
    vpp = len(stages) // pp
    mtp = [s for s, letters in enumerate(stages) if "m" in letters]
    if len(mtp) > 1:
        return f"MTP layers are split over stages {mtp}; Megatron needs them in one stage", "put every m in one stage"
    if mtp and mtp[0] // pp != vpp - 1:
        return (f"the MTP layer is in stage {mtp[0]}, virtual chunk {mtp[0] // pp} of rank {mtp[0] % pp}; "
                f"Megatron needs it in the rank's last chunk ({vpp - 1})", "move m to a stage of the last chunk")
    return None


def layout_bounds(stages: Sequence[str], pp: int) -> list[tuple[int, int]]:
    """Layer range of each stage; ``InputError`` where Megatron's MTP rule for ``pp`` ranks fails."""
    problem = mtp_problem(stages, pp)
    if problem is not None:
        raise InputError(_FIELD, *problem)
    out, start = [], 0
    for letters in stages:
        out.append((start, start + len(letters)))
        start += len(letters)
    return out


def compress_stage(text: str) -> str:
    """Runs of three or more equal letters as ``x*n``."""
    out, k = [], 0
    while k < len(text):
        n = len(text) - k - len(text[k:].lstrip(text[k]))
        out.append(f"{text[k]}*{n}" if n >= 3 else text[k] * n)
        k += n
    return "".join(out)


def join_stages(stages: Sequence[str]) -> str:
    """Stages (already compressed) joined by ``|``, runs of equal stages as ``(S|)*n,``."""
    out, i, n = [], 0, len(stages)
    while i < n:
        s = stages[i]
        run = next((j for j in range(i, n) if stages[j] != s), n) - i
        reps = run - 1 if i + run == n else run
        if reps >= 2 and len(f"({s}|)*{reps},") < reps * (len(s) + 1):
            out.append(f"({s}|)*{reps},")
            i += reps
        else:
            out.append(s + ("|" if i < n - 1 else ""))
            i += 1
    return "".join(out)
