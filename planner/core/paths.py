"""Where the package data (model configs, cluster presets, JSON schemas) lives.

Read with ``importlib.resources`` so that an installed wheel finds them as well as a
source checkout; setuptools installs package data as plain files, so each folder is a
``pathlib.Path``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["DATA_DIR", "MODELS_DIR", "CLUSTERS_DIR", "SCHEMAS_DIR", "SHIPPED_MODELS"]

DATA_DIR = Path(str(resources.files("planner.data")))
"""The ``planner/data`` package folder."""
MODELS_DIR = DATA_DIR / "models"
"""Hugging Face ``config.json`` files of the shipped models, one ``<id>.json`` each."""
CLUSTERS_DIR = DATA_DIR / "clusters"
"""Cluster/training YAML files; ``<model id>.yaml`` is that model's default cluster."""
SCHEMAS_DIR = DATA_DIR / "schemas"
"""``plan.schema.json`` and ``costs.schema.json``."""
SHIPPED_MODELS = ("llama3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3")
"""Model ids accepted in place of a config path."""
