"""Pictures: ``render_png`` and the ``--png`` options of ``ppplan plan`` and ``ppplan simulate``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from planner.cli import cli
from planner.cli.common import run_guarded
from planner.core.errors import InputError
from planner.plot import render_png
from test_export_plans import case_plan

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["uniform", "vpp2", "v", "fused", "w_moved"])
def test_render_png_writes_a_picture(name, tmp_path):
    path = tmp_path / "plan.png"
    render_png(case_plan(name), path)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def test_plan_png_option(tmp_path, capsys):
    png, out = tmp_path / "p.png", tmp_path / "p.json"
    code = run_guarded(cli, ["plan", "llama3-8b", "--pp", "2", "--microbatches", "4", "--work", "2",
                             "--out", str(out), "--png", str(png), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == "" and out.exists()
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 20_000


def test_simulate_png_option(tmp_path, capsys):
    plan_path, png = tmp_path / "plan.json", tmp_path / "sim.png"
    case_plan("vpp2").save(plan_path)
    code = run_guarded(cli, ["simulate", str(plan_path), "--png", str(png)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.startswith("step ")
    assert png.stat().st_size > 20_000


def test_missing_matplotlib_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(InputError, match=r"--png: drawing needs matplotlib, which is not installed "
                                         r"\(pip install 'ppplan\[plot\]'\)"):
        render_png(case_plan("uniform"), tmp_path / "x.png")
    out = tmp_path / "p.json"
    code = run_guarded(cli, ["plan", "llama3-8b", "--out", str(out), "--png", str(tmp_path / "x.png")])
    assert code == 2 and "drawing needs matplotlib" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "x.png").exists()


def test_shipped_picture_is_small():
    path = REPO / "docs" / "plan_qwen3_next.png"
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and 20_000 < len(data) < 300_000
