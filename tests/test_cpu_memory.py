"""``--cpu-allocator keep`` (profiler.cpu_memory): freed memory stays in the process, as CUDA's
caching allocator keeps it; ``system`` returns a large freed block to the operating system.
Each case runs in its own process (the setting is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from profiler.cpu_memory import apply_allocator

_PROBE = textwrap.dedent("""
    import sys, torch
    from profiler.cpu_memory import apply_allocator
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    said = apply_allocator(sys.argv[1], "cpu")
    x = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, touched
    held = rss()
    del x
    print(said)
    print((held - rss()) / 2**20)
""")


def _returned_mib(choice: str) -> tuple[str, float]:
    out = subprocess.run([sys.executable, "-c", _PROBE, choice], capture_output=True, text=True, timeout=120,
                         check=True).stdout.splitlines()
    return out[0], float(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc are Linux's")
def test_keep_holds_freed_memory_and_system_returns_it():
    said, returned = _returned_mib("system")
    assert said.startswith("system allocator") and returned > 48, (said, returned)
    said, returned = _returned_mib("keep")
    assert said.startswith("glibc malloc keeps freed memory"), said
    assert returned < 8, f"keep returned {returned:.1f} MiB of a freed 64 MiB block to the system"


def test_only_cpu_ranks_change():
    assert apply_allocator("keep", "cuda") == "device allocator (not a CPU rank)"


def test_profile_records_the_allocator(tmp_path):
    """``ppplan profile --cpu-allocator keep`` runs its measuring process so and says so in the table."""
    out = tmp_path / "P.json"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "profile", "qwen3-30b-a3b", "--device", "cpu",
                          "--scale", "0.02", "--seq-len", "32", "--repeats", "1", "--warmup", "0", "--no-links",
                          "--modules", "native", "--quiet", "--cpu-allocator", "keep", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    said = json.loads(out.read_text())["meta"]["profiler"]["cpu_allocator"]
    assert said.startswith("glibc malloc keeps freed memory") or not sys.platform.startswith("linux"), said
