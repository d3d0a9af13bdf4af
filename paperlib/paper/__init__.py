"""The paper's side, built on :mod:`paperlib.method`: its models (:mod:`.models`), what the paper's tables read of
their purge (:mod:`.purge`: the pruned architecture; the method's one engine purges them), the magnitude-pruning
baseline (:mod:`.pruning`), and what the paper reports: its tables' numbers (:mod:`.paper_results`) and the labels
of its equations, tables and appendices (:mod:`.paper_numbers`)."""
