"""Where the shipped examples (model configs, clusters, routing traces) live."""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXAMPLES_DIR", "MODELS_DIR", "CLUSTERS_DIR", "SHIPPED_MODELS"]

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
"""The repository's ``examples/`` folder (the package is installed editable, see README)."""
MODELS_DIR = EXAMPLES_DIR / "models"
"""Hugging Face ``config.json`` files of the shipped models, one ``<id>.json`` each."""
CLUSTERS_DIR = EXAMPLES_DIR / "clusters"
"""Cluster/training YAML files; ``<model id>.yaml`` is that model's default cluster."""
SHIPPED_MODELS = ("llama3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3")
"""Model ids accepted in place of a config path."""
