"""Run one experiment from the command line, in one process or several under ``torchrun``.

    python -m paperlib.harness.run dataset=mnist model=mlp target=0.3 epochs=2
    torchrun --nproc_per_node=8 -m paperlib.harness.run dataset=cifar10 model=wrn-28-10 target=0.7 preset=paper

Arguments are ``key=value`` or ``--key value`` (``--key=value``), with the parameters of
:func:`paperlib.harness.training.run_experiment`, read as YAML (``target=[0.3,0.3,0.3]``, ``dual_restarts=false``,
``lr=1e-3``; ``--flag`` alone means true). One process runs exactly as ``run_experiment`` does; under ``torchrun`` the
processes train one model on their shards of every global batch (:mod:`paperlib.harness.distributed`). A killed run
started again with the same command resumes from its last checkpoint.
"""

from __future__ import annotations

import re
import sys

import yaml

from . import distributed
from .training import resolve_device, run_experiment


_EXPONENT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _value(text: str):
    """A YAML scalar or list; YAML's float syntax without a dot (``1e-3``) is read as a float too."""
    value = yaml.safe_load(text)
    if isinstance(value, str) and _EXPONENT.match(value):
        return float(value)
    return value


def parse(argv: list[str]) -> dict:
    """``key=value``, ``--key value``, ``--key=value``, ``--flag`` -> parameters (``-`` in keys becomes ``_``)."""
    params, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            if not eq:
                if i + 1 < len(argv) and not argv[i + 1].startswith("--") and "=" not in argv[i + 1]:
                    text, i = argv[i + 1], i + 1
                else:
                    text = "true"
        elif "=" in arg:
            key, _, text = arg.partition("=")
        else:
            raise SystemExit(f"paperlib.harness.run: expected key=value or --key value, got {arg!r}")
        params[key.replace("-", "_")] = _value(text)
        i += 1
    return params


def main(argv: list[str] | None = None) -> dict:
    """Parse, join the process group if ``torchrun`` started several processes, run, leave the group."""
    params = parse(sys.argv[1:] if argv is None else argv)
    params.setdefault("progress", True)
    distributed.setup(resolve_device(params.get("device", "auto")))
    try:
        return run_experiment(**params)
    finally:
        distributed.teardown()


if __name__ == "__main__":
    main()
