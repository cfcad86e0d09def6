"""Costs from the user's own run: PyTorch profiler (Kineto) traces read into a cost table
(``profiler.trace.table.costs_from_trace``), and the range names a run leaves so that they
can be read (``profiler.trace.names``, recorded by ``profiler.trace.record``)."""
