"""The names the method's choices take, defined once (the experiment harness adds its own:
:mod:`paperlib.harness.vocabulary`)."""

#: One constraint (or penalty) for the whole model, or one per gated layer (App. B).
GROUPINGS = ("model", "layer")
#: Gates on groups (§2) or on single weights (App. L).
SPARSITY_KINDS = ("structured", "unstructured")
#: He-normal initialisation of gated linear weights: by fan-in (intended), or by fan-out (what the authors' code runs).
LINEAR_INITS = ("fan_in", "fan_out")
#: How the constrained method updates its Lagrange multipliers: the paper's projected gradient ascent (with or
#: without dual restarts), the nuPI controller, or the augmented Lagrangian's method of multipliers (beyond the paper).
DUAL_OPTIMIZERS = ("gradient_ascent", "nupi", "augmented_lagrangian")
#: Whether the gates' pass of a training step runs through ``torch.compile``: on CUDA only, always, never
#: (:mod:`paperlib.method.gate_pass`).
COMPILE_GATES = ("auto", "always", "never")  # not on/off, which YAML and papermill read as booleans
#: What a target bounds: the paper's expected L0-density of the gated groups, or (beyond the paper) the expected
#: parameters or MACs of the whole purged model (:mod:`paperlib.method.budget`).
MEASURES = ("density", "params", "macs")
