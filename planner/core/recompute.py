"""Recomputation as data: the three whole-layer modes and Megatron's module sets.

A module set is Megatron-Core's ``--recompute-granularity selective --recompute-modules ...``
(megatron/core/transformer/transformer_config.py ``recompute_modules``; megatron/training/
arguments.py ``--recompute-modules``): each named sub-module drops what it saved in the
forward and runs its forward again in the backward. A plan carries the set as one mode
string, ``modules:<name>,<name>`` in ``MODULES`` order, so every table, record and plan file
keeps a mode as text. What each module saves and costs is ``profiler.analytical``'s
``module_terms``.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.core.errors import InputError

__all__ = ["MODULES", "PREFIX", "CHOICE_SEP", "module_set", "modules_of", "is_module_set", "parse_modules",
           "module_sets_in", "choice_of"]

MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron-Core's ``recompute_modules`` choices, in its docstring's order."""
PREFIX = "modules:"
"""How a module-set mode starts."""
CHOICE_SEP = ";"
"""Between the sets of a choice (``modules:moe_act,layernorm;modules:layernorm,moe``): the planner
plans with each and keeps the fastest plan that fits, as ``auto`` does with the three modes."""


def is_module_set(mode: str) -> bool:
    """Whether ``mode`` is a module set (``modules:...``) rather than none/selective/full/auto."""
    return mode.startswith(PREFIX)


def modules_of(mode: str) -> tuple[str, ...]:
    """The modules one set recomputes (empty for the whole-layer modes)."""
    return tuple(mode[len(PREFIX):].split(",")) if is_module_set(mode) else ()


def module_sets_in(text: str) -> tuple[str, ...]:
    """The module-set modes of a set or a choice of sets (``CHOICE_SEP``)."""
    return tuple(text.split(CHOICE_SEP)) if is_module_set(text) else ()


def choice_of(sets: Sequence[Sequence[str]], *, field: str) -> str:
    """One mode string for one or several module lists (duplicates dropped, order kept)."""
    modes = [module_set(names, field=field) for names in sets]
    if not modes:
        raise InputError(field, "no module list given", f"give one or more lists of {', '.join(MODULES)}")
    return CHOICE_SEP.join(dict.fromkeys(modes))


def module_set(names: Sequence[str], *, field: str) -> str:
    """The canonical mode of a list of module names (``InputError`` on an unknown or empty one)."""
    names = [str(n).strip() for n in names]
    bad = [n for n in names if n not in MODULES]
    if bad or not names:
        raise InputError(field, f"unknown recompute module {bad[0]!r}" if bad else "no module given",
                         f"use some of {', '.join(MODULES)} (Megatron's --recompute-modules), comma separated")
    return PREFIX + ",".join(m for m in MODULES if m in names)


def parse_modules(text: str | Sequence[str], *, field: str) -> str:
    """The mode of a comma-separated list (``--recompute-modules moe_act,layernorm``), or the
    choice of several (the option given more than once)."""
    texts = [text] if isinstance(text, str) else list(text)
    return choice_of([[n for n in t.split(",") if n.strip()] for t in texts], field=field)
