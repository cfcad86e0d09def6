"""[Note: CPU allocator] Keep freed memory in the process, as CUDA's caching allocator does.

On a GPU, torch's caching allocator keeps every freed block for the next allocation
(https://pytorch.org/docs/stable/notes/cuda.html#memory-management), so a training step
pays no operating-system work for its activations. On a CPU torch allocates with the C
library's ``malloc``: glibc serves blocks above its mmap threshold (128 KiB to 32 MiB,
adjusted as it goes) with fresh ``mmap`` pages, returns them with ``munmap`` on free, and
trims the heap top back to the system above ``M_TRIM_THRESHOLD`` (mallopt(3)). A pipeline
step that saves several microbatches' activations and frees them in its backward then pays
page faults and unmaps inside its layers' ranges, which a profile repeating one layer on
the same buffers does not (glibc reuses them). PyTorch's CPU tuning guide recommends an
allocator that keeps memory (jemalloc or TCMalloc) for the same reason
(https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html, "Switch Memory
allocator").

``keep_freed_memory`` does that with glibc itself: ``mallopt(M_MMAP_MAX, 0)`` (every block
from the heap) and ``mallopt(M_TRIM_THRESHOLD, max)`` (the heap never trimmed), the
``MALLOC_MMAP_MAX_`` and ``MALLOC_TRIM_THRESHOLD_`` settings, taken at run time in each
rank's process before it allocates its model. Elsewhere (not glibc, or a GPU rank) nothing
changes, and the returned line says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["ALLOCATORS", "keep_freed_memory", "apply_allocator"]

ALLOCATORS = ("system", "keep")
"""``--cpu-allocator`` values: ``system`` (the C library's defaults) or ``keep`` (freed memory
kept for reuse, see the note)."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
"""glibc malloc.h's parameter numbers."""
_NEVER = 2**31 - 1
"""mallopt takes an int: the largest trim threshold it can be given (2 GiB of free heap top)."""


def keep_freed_memory() -> str:
    """Tell glibc to keep freed memory (see the note); returns what was done, in one line."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return "system allocator (no glibc mallopt here)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_MAX, 0) != 1 or mallopt(_M_TRIM_THRESHOLD, _NEVER) != 1:
        return "system allocator (glibc refused mallopt)"
    return "glibc malloc keeps freed memory (M_MMAP_MAX 0, M_TRIM_THRESHOLD 2 GiB)"


def apply_allocator(choice: str, device_type: str) -> str:
    """The ``--cpu-allocator`` choice for a rank on ``device_type``; returns what holds."""
    if device_type != "cpu":
        return "device allocator (not a CPU rank)"
    if choice == "keep":
        return keep_freed_memory()
    return "system allocator (C library defaults)"
