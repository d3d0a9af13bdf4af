"""The experiment harness, built on :mod:`paperlib.method` and :mod:`paperlib.paper`: configuration and presets, data,
the runner (:mod:`.training`, :mod:`.methods`, :mod:`.distributed`, :mod:`.run`), records and their pages
(:mod:`.records`, :mod:`.run_pages`, :mod:`.plots`), the rules that judge a run (:mod:`.rules`), grids and sweeps
(:mod:`.grids`, :mod:`.sweeps`, :mod:`.studies`), the benchmark and the bisection search."""
