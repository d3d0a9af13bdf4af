"""The paper's side, built on :mod:`paperlib.method`: its models (:mod:`.models`), their purge into an
``nn.Sequential`` (:mod:`.purge`), the magnitude-pruning baseline (:mod:`.pruning`), and what the paper
reports: its tables' numbers (:mod:`.paper_results`) and the labels of its equations, tables and
appendices (:mod:`.paper_numbers`)."""
