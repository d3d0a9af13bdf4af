"""Every study of the book in one place: which grids make it and which page shows it.

A *study* is one of the paper's result tables (:data:`TABLES`, by its LaTeX label,
compared with the paper cell by cell), one of its figures or appendix experiments
(:data:`FIGURES`), or one of the book's own experiments (:data:`OURS`). Each names
the grid files whose runs make it (every grid names its preset) and the result
page that shows it. Everything else asks here:

- the pages and findings modules, for the grids whose records they read
  (:func:`grids`);
- the sweeps, which take a study's name in place of its grid files
  (``python -m paperlib.harness.sweeps tab:cifar10_control``);
- the run indexes (book/runs_*.md), for the experiment folders whose runs they
  list (:func:`indexed_experiments`), and ``_toc.yml``, whose globs
  tests/test_studies.py checks against the same;
- the tests, for every grid of the book.

How many runs a cell of the paper aggregates is the paper's, in
``paper_results.csv`` (:func:`paperlib.paper.paper_results.paper_runs`), not here.
"""

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from . import records


@dataclass(frozen=True)
class Study:
    """The grid files whose runs make a study (a ``paper``-preset grid first where there is one), the result
    page that shows it (``results_mnist``), and ``where``: the run parameters that pick its records out of
    grids shared with another study (see :func:`analysis.comparison.compare`)."""

    grids: tuple[str, ...]
    page: str
    where: dict | None = None

    def grids_at(self, preset: str) -> tuple[str, ...]:
        """The study's grids whose runs use ``preset`` (``paper`` or ``cpu``), as each grid file names it."""
        return tuple(grid for grid in self.grids if grid_preset(grid) == preset)

    @property
    def experiments(self) -> tuple[str, ...]:
        """The experiment folders of ``runs/`` that the study's grids write to, in grid order."""
        return tuple(dict.fromkeys(grid_experiment(grid) for grid in self.grids))


_UNSTRUCTURED_MNIST = ("grids/unstructured_mnist_paper.yaml", "grids/magnitude_pruning_mnist_paper.yaml",
                       "grids/unstructured_mnist.yaml", "grids/magnitude_pruning_mnist.yaml")
_TINY = ("grids/tinyimagenet_paper.yaml", "grids/tinyimagenet.yaml")

#: The paper's result tables that our grids reproduce, compared cell by cell (:mod:`analysis.comparison`).
TABLES = {
    "tab:mnist": Study(("grids/table1_mnist_paper.yaml", "grids/table1_mnist.yaml"), "results_mnist"),
    "tab:mlp_control": Study(("grids/mlp_control_paper.yaml", "grids/mlp_control_seeds_paper.yaml",
                              "grids/mlp_control_5seeds_paper.yaml", "grids/mlp_control.yaml"), "results_mnist"),
    "tab:lenet_control": Study(("grids/lenet_control_paper.yaml", "grids/lenet_control_seeds_paper.yaml",
                                "grids/lenet_control.yaml"), "results_mnist"),
    "tab:cifar10_control": Study(("grids/cifar10_control_paper.yaml", "grids/cifar10_control.yaml",
                                  "grids/cifar10_control_seeds.yaml"), "results_cifar10"),
    "tab:cifar10": Study(("grids/wrn_gates_ablation.yaml", "grids/cifar10_flagship.yaml"), "results_cifar10",
                         where={"detach_gates": True}),
    "tab:mnist_unstructured_comparison_mlp": Study(_UNSTRUCTURED_MNIST, "results_unstructured"),
    "tab:mnist_unstructured_comparison_lenet": Study(_UNSTRUCTURED_MNIST, "results_unstructured"),
    "tab:cifar100_control": Study(("grids/cifar100_control_paper.yaml",), "results_beyond"),
    "tab:cifar100": Study(("grids/cifar100_control_paper.yaml",), "results_beyond"),
    "app:all_comparisons:tiny_imagenet": Study(_TINY, "results_beyond"),
    "tab:tiny_unstructured_comparison": Study(_TINY, "results_beyond"),
    "tab:mp_comparison_imagenet": Study(("grids/imagenet.yaml", "grids/imagenet_magnitude_pruning.yaml"),
                                        "results_beyond"),
}

#: The paper's figures and appendix experiments that our grids reproduce, by their LaTeX label.
FIGURES = {
    "fig:dual_restarts": Study(("grids/dual_restarts_paper.yaml", "grids/dual_restarts.yaml"), "results_dynamics"),
    "fig:mnist_gate_histograms": Study(("grids/gate_histograms_mnist_paper.yaml", "grids/gate_histograms_mnist.yaml"),
                                       "results_dynamics"),
    "app:bisection": Study(("grids/bisection_paper.yaml",), "results_beyond"),
}

#: The book's own experiments: investigations of a result, and what goes beyond the paper.
OURS = {
    "mlp_dual_lr": Study(("grids/mlp_dual_lr.yaml",), "results_mnist_why"),
    "fan_out_init": Study(("grids/mlp_linear_init.yaml", "grids/lenet5_linear_init.yaml"), "results_mnist_why"),
    "mnist_clamp": Study(("grids/mnist_clamp.yaml",), "results_mnist_why"),
    "compiled_gates": Study(("grids/compiled_gates_paper.yaml",), "results_mnist_why"),
    "mnist_flagship": Study(("grids/mnist_flagship.yaml",), "results_mnist"),
    "lenet5_collapse": Study(("grids/lenet5_collapse.yaml",), "lenet5_collapse"),
    "cifar10_dual_lr": Study(("grids/cifar10_dual_lr.yaml",), "results_cifar10"),
    "cifar10_layer_cause": Study(("grids/cifar10_layer_cause.yaml",), "results_cifar10_misses"),
    "cifar10_free_gates": Study(("grids/cifar10_free_gates.yaml",), "results_cifar10_misses"),
    "cifar10_under_cause": Study(("grids/cifar10_under_cause.yaml",), "results_cifar10_misses"),
    "cifar10_cpu_protocol": Study(("grids/cifar10_cpu_free_gates.yaml", "grids/cifar10_cpu2_control.yaml",
                                   "grids/cifar10_cpu2_penalized.yaml"), "results_cifar10"),
    "cifar10_cpu2_dual_lr": Study(("grids/cifar10_cpu2_dual_lr.yaml",), "results_cifar10_misses"),
    "cifar10_cpu2_layer_cause": Study(("grids/cifar10_cpu2_one_block.yaml", "grids/cifar10_cpu2_nupi.yaml",
                                       "grids/cifar10_cpu2_schedule.yaml"), "results_cifar10_misses"),
    "cifar10_gpu_protocol": Study(("grids/cifar10_gpu_free_gates.yaml", "grids/cifar10_gpu_control.yaml"),
                                  "results_cifar10"),
    "cifar10_device_check": Study(("grids/cifar10_device_check.yaml",), "results_cifar10"),
    "mnist_free_gates": Study(("grids/mnist_free_gates_paper.yaml",), "results_mnist"),
    "nupi_gain": Study(("grids/nupi_gain_paper.yaml",), "results_dual_optimizers"),
    "dual_optimizers": Study(("grids/dual_optimizers_paper.yaml",), "results_dual_optimizers"),
    "dual_optimizers_lenet5": Study(("grids/dual_optimizers_lenet5_paper.yaml",), "results_dual_optimizers"),
    "nupi_lenet5_gain_cause": Study(("grids/dual_optimizers_lenet5_gain_cause.yaml",), "results_dual_optimizers"),
}

#: Every study, by name.
STUDIES = {**TABLES, **FIGURES, **OURS}

#: The run indexes of the book (book/runs_*.md) and the result pages whose studies' runs each lists.
RUN_INDEXES = {
    "runs_mnist": ("results_mnist", "results_mnist_why"),
    "runs_dynamics": ("results_dynamics",),
    "runs_cifar10": ("results_cifar10", "results_cifar10_misses"),
    "runs_beyond": ("results_unstructured", "results_beyond"),
    "runs_dual_optimizers": ("results_dual_optimizers",),
    "runs_lenet5_collapse": ("lenet5_collapse",),
}


def study(name: str) -> Study:
    """The study called ``name`` (a LaTeX label of the paper, or one of :data:`OURS`)."""
    if name not in STUDIES:
        raise KeyError(f"no study is called {name!r}; the studies: {', '.join(STUDIES)}")
    return STUDIES[name]


def grids(*names: str, preset: str | None = None) -> tuple[str, ...]:
    """The grid files of the studies ``names``, in order and each once; only those at ``preset`` if given."""
    found = [grid for name in names
             for grid in (study(name).grids if preset is None else study(name).grids_at(preset))]
    return tuple(dict.fromkeys(found))


def every_grid() -> tuple[str, ...]:
    """Every grid file of every study, each once."""
    return grids(*STUDIES)


def indexed_experiments(index: str) -> list[str]:
    """The experiment folders whose runs the run index ``index`` (``runs_mnist``) lists: those of every study
    shown on its pages, in the order of :data:`STUDIES`."""
    pages = RUN_INDEXES[index]
    found = [experiment for item in STUDIES.values() if item.page in pages for experiment in item.experiments]
    return list(dict.fromkeys(found))


@cache
def _grid_base(grid: str) -> dict:
    return yaml.safe_load((records.project_root() / Path(grid)).read_text())["base"]


def grid_experiment(grid: str) -> str:
    """The experiment folder of ``runs/`` a grid file writes to (its ``base.experiment``)."""
    return _grid_base(grid)["experiment"]


def grid_preset(grid: str) -> str:
    """The preset a grid file names in its ``base`` (every grid of the book names one)."""
    return _grid_base(grid)["preset"]
