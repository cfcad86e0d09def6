"""``python -m planner.cli`` runs the ppplan command line."""

from planner.cli import main

main()
