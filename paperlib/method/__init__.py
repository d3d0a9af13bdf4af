"""The method, for any PyTorch model; imports only torch.

Hard-concrete gates (:mod:`.gates`), the gated layers (:mod:`.layers`) that :mod:`.sparsify` puts on any model and the
paper's models are built from, the Lagrangian with its multipliers and dual restarts (:mod:`.lagrangian`,
:mod:`.objective`), one object that owns a constrained training step (:mod:`.constrained`, with the compiled gate pass
of :mod:`.gate_pass`), purging by tracing (:mod:`.graph_purge`, :mod:`.channels`) and counting (:mod:`.counting`).
"""
