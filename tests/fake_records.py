"""Records as records.load_record returns them, made here for the tests of analysis.control and analysis.misses."""

#: Two gated blocks of a WideResNet-16-1, by their layer names.
LAYERS = ["stage1.0.conv1.conv", "stage2.0.conv1.conv"]


def record(method, grouping="model", target=None, lmbda=None, densities=(0.5, 0.5), error=10.0, seed=0):
    """A record as records.load_record returns it, with the final epoch's densities (one per layer)."""
    model_density = sum(densities) / len(densities)
    history = [{"epoch": "1", "phase": "train", "l0_density": str(model_density),
                **{f"density[{layer}]": str(d) for layer, d in zip(LAYERS, densities)}}]
    params = {"run_name": f"{method}-{grouping}-{target}-{lmbda}-s{seed}", "model": "wrn-16-1", "method": method,
              "grouping": grouping, "target": target, "lmbda": lmbda, "seed": seed}
    metrics = {"l0_density": None if method == "dense" else model_density,
               "l0_density_per_layer": dict(zip(LAYERS, densities)), "params_pct": 100 * model_density,
               "macs_pct": 90 * model_density, "val_error_final": error, "epochs_completed": 1}
    return {"path": "/nowhere", "params": params, "metrics": metrics, "history": history}
