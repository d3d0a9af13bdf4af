"""The method, for any PyTorch model; imports only torch.

Hard-concrete gates (:mod:`.gates`), gated layers (:mod:`.layers`, :mod:`.sparsify`), the Lagrangian with
its multipliers and dual restarts (:mod:`.lagrangian`, :mod:`.objective`), one object that owns a constrained
training step (:mod:`.constrained`, with the compiled gate pass of :mod:`.gate_pass`), purging by tracing
(:mod:`.graph_purge`, :mod:`.channels`) and counting that knows gated layers (:mod:`.counting`).
"""
