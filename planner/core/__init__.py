"""The shared vocabulary of ppplan: specs, costs, schedules, plans, simulate, validate.

Plain data and pure functions only; imports neither torch nor ortools.
"""
