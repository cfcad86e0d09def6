"""Package data: model configs, cluster presets and JSON schemas shipped with ppplan.

Read through ``importlib.resources`` (see ``planner.core.paths``), so an installed wheel
finds them as well as a source checkout.
"""
