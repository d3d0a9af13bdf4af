"""Every study of the book in one place: which grids make it and which page shows it.

A *study* is one of the paper's result tables (:data:`TABLES`, by LaTeX label, compared cell by cell), one of its
figures or appendix experiments (:data:`FIGURES`), or one of the book's own experiments (:data:`OURS`). Pages, sweeps
(``python -m paperlib.harness.sweeps tab:cifar10_control``), run indexes and tests ask here for a study's grids
(:func:`grids`) and the experiment folders an index lists (:func:`indexed_experiments`). How many runs a cell of the
paper aggregates is ``paper_results.csv``'s (:func:`paperlib.paper.paper_results.paper_runs`), not here.
"""

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from . import records


@dataclass(frozen=True)
class Study:
    """The grid files whose runs make a study (a ``paper``-preset grid first where there is one), the result page that
    shows it (``results_mnist``), and ``where``: the run parameters that pick its records out of grids shared with
    another study (see :func:`analysis.comparison.compare`)."""

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
                                "grids/lenet_control_seed1_paper.yaml", "grids/lenet_control.yaml"), "results_mnist"),
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
    "cifar10_gpu_granularity": Study(("grids/cifar10_gpu_granularity.yaml",), "results_cifar10_misses"),
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


@dataclass(frozen=True)
class Folder:
    """How the run indexes (book/runs_*.md) present an experiment folder of ``runs/``: its ``title``; ``about``, one
    line on its runs; ``split``, the run parameters whose values divide a long list into parts; ``main``: whether it
    holds its result page's main table (shown unfolded). Its tables and pages are read from :data:`STUDIES`
    (:func:`folder_refs`, :func:`folder_pages`)."""

    title: str
    about: str
    split: tuple[str, ...] = ()
    main: bool = False


#: Every experiment folder of ``runs/``, and every one a study's grids write to, by name: its title and one line.
FOLDERS = {
    "mnist": Folder(
        "MNIST: the paper's MLP and LeNet5 architectures",
        "Model-wise and layer-wise targets that give Louizos et al.'s pruned architectures, one run per seed.",
        split=("model", "grouping"), main=True),
    "mlp_control": Folder(
        "MNIST MLP: a constraint against a penalty",
        "The paper's five targets (constrained) and five penalty coefficients (penalized), model-wise and "
        "layer-wise, one run per seed.",
        split=("method", "grouping")),
    "lenet_control": Folder(
        "MNIST LeNet5: a constraint against a penalty",
        "The paper's five targets (constrained) and five penalty coefficients (penalized), model-wise and "
        "layer-wise.",
        split=("method", "grouping")),
    "mlp_dual_lr": Folder(
        "MNIST MLP at the dual learning rate the paper prints",
        "Table 1's two MLP rows at a dual learning rate of 0.001 (App. J.3) instead of the authors' 0.0001: "
        "does a faster dual step stop the density's overshoot?"),
    "mlp_linear_init": Folder(
        "MNIST MLP with the authors' initialisation",
        "The cells where our MLP and the paper's differ most, with the gated linear layers initialised by "
        "fan-out, as the authors' code does."),
    "lenet5_linear_init": Folder(
        "MNIST LeNet5 with the authors' initialisation",
        "LeNet5 cells where ours and the paper's differ, with the gated linear layers initialised by fan-out, as "
        "the authors' code does."),
    "mnist_clamp": Folder(
        "MNIST with log α clamped",
        "The cells whose parameter counts ours miss, with every gate's log α clamped to [ln 0.01, ln 100] after "
        "each step: do the paper's runs look like these?",
        split=("model",)),
    "compiled_gates": Folder(
        "MNIST MLP with the compiled gate pass",
        "Table 1's model-wise MLP row, seed 0, with every gate sampled by one compiled pass: its twin is Table 1's "
        "eager seed-0 run."),
    "mnist_free_gates": Folder(
        "MNIST with free gates",
        "MLP and LeNet5 with a target of 100%, which never binds: where the task loss alone takes the density, "
        "which tells whether a target binds."),
    "dual_restarts": Folder(
        "LeNet5 with and without dual restarts",
        "Model-wise targets of 30% and 70%, each with its multiplier reset to zero once its constraint holds "
        "(dual restarts) and without.",
        main=True),
    "gate_histograms_mnist": Folder(
        "Gate medians of MNIST models",
        "MLP and LeNet5 under layer-wise targets of 70%, their gate medians saved at several epochs."),
    "cifar10_control": Folder(
        "CIFAR-10 at the paper's gates' learning rate: a constraint against a penalty",
        "WideResNet-16-1 with gates' learning rate 6: the paper's five targets and five penalty coefficients, "
        "model-wise and layer-wise, a dense baseline, and more seeds of three model-wise targets.",
        split=("method", "grouping")),
    "gates_ablation": Folder(
        "CIFAR-10: the gates' learning rate and the stop-gradient",
        "WideResNet-16-1 penalized and constrained at gates' learning rates of 0.1 and 6, and without the "
        "stop-gradient of eq. 13."),
    "cifar10": Folder(
        "CIFAR-10: the flagship run",
        "The book's first command, `papermill book/cifar10.ipynb out.ipynb -p target 0.7`: a model-wise target "
        "of 70%."),
    "cifar10_dual_lr": Folder(
        "CIFAR-10 layer-wise 20% at other dual learning rates",
        "The layer-wise 20% cell at the paper's unscaled dual learning rate and at four times the scaled one: "
        "does the scaled rate hold its six constraints?"),
    "cifar10_layer_cause": Folder(
        "CIFAR-10 layer-wise 20% with the gates' learning rate decayed",
        "Cause test: the gates' learning rate decayed with the weights', to keep a block's gates from closing "
        "after the last milestone with its multiplier at zero."),
    "cifar10_free_gates": Folder(
        "CIFAR-10 with free gates",
        "WideResNet-16-1 with a target of 100%, which never binds, at the gates' learning rates tried: where the "
        "task loss alone takes the density; the largest rate that keeps it at 85% or more was chosen."),
    "cifar10_under_cause": Folder(
        "CIFAR-10 targets of 80% at gates' learning rate 0.1",
        "Cause test: do the 80% targets that end under at the gates' learning rate of 6 land on target at 0.1?"),
    "cifar10_cpu2": Folder(
        "CIFAR-10 where the targets bind: a constraint against a penalty",
        "WideResNet-16-1 at the gates' learning rate chosen by the free-gates runs: the paper's five targets, "
        "model-wise and layer-wise, and penalty coefficients.",
        split=("method", "grouping"), main=True),
    "cifar10_cpu2_dual_lr": Folder(
        "CIFAR-10 layer-wise misses at the unscaled dual learning rate",
        "Cause test: layer-wise 35% and 65% at the paper's dual learning rate of 0.0007, not scaled to the "
        "shorter schedule."),
    "cifar10_cpu2_layer_cause": Folder(
        "CIFAR-10 layer-wise misses: three cause tests",
        "One block constrained alone, nuPI in place of gradient ascent, and a schedule twice as long: which "
        "keeps the layer-wise blocks on their targets?"),
    "cifar10_gpu": Folder(
        "CIFAR-10 on a GPU: a wider WideResNet",
        "Free-gates runs that choose the WideResNet, then the control table's targets and penalty coefficients, "
        "trained on a lent GPU.",
        split=("method", "grouping")),
    "cifar10_gpu_granularity": Folder(
        "CIFAR-10 layer-wise misses: larger blocks, all else the CPU protocol's",
        "Cause test: WideResNet-16-4 (64 to 256 gates a block) at the CPU protocol's settings, layer-wise 35% and "
        "65% and its free-gates run, trained on a lent GPU: do blocks with more gates land?"),
    "cifar10_device_check": Folder(
        "CIFAR-10: device against seed",
        "Seed 0 of three model-wise targets trained again on a GPU, to tell a difference of device from one of "
        "seed."),
    "unstructured_mnist": Folder(
        "Unstructured sparsity on MNIST: the constraint",
        "MLP and LeNet5 with a gate on every weight, layer-wise targets of 20, 10, 5 and 1%, and their dense "
        "baselines.",
        main=True),
    "magnitude_pruning_mnist": Folder(
        "Unstructured sparsity on MNIST: magnitude pruning",
        "A dense model trained, pruned layer by layer by weight magnitude to the same targets, then fine-tuned.",
        split=("model",)),
    "cifar100_control": Folder(
        "CIFAR-100: a constraint against a penalty",
        "WideResNet-28-10 on CIFAR-100, the paper's targets and penalty coefficients, model-wise and layer-wise "
        "(GPU work)."),
    "tinyimagenet": Folder(
        "TinyImageNet: a constraint against a penalty",
        "ResNet18 on TinyImageNet, constrained and penalized, model-wise and layer-wise (needs the dataset and a "
        "GPU)."),
    "imagenet": Folder(
        "ImageNet: the constraint against filter pruning",
        "ResNet50 constrained model-wise and layer-wise, against L1 filter pruning of a trained ResNet50 (needs "
        "ImageNet and GPUs)."),
    "bisection": Folder(
        "Bisection search for the penalty coefficient",
        "Searches for the λ_pen that gives an MLP of 50% (± 1%) density, model-wise and layer-wise: each search, "
        "then the trainings it made."),
    "dual_optimizers": Folder(
        "Other dual optimisers on MNIST",
        "Gradient ascent without dual restarts, the augmented Lagrangian and nuPI on cells of Table 1 and of the "
        "MLP control table, nuPI's gain chosen on one cell, and LeNet5's rows.",
        split=("dual_optimizer", "model"), main=True),
    "lenet5_collapse": Folder(
        "LeNet5 layer-wise collapse",
        "Table 1's LeNet5 layer-wise cell for 40 epochs, at several dual learning rates, with and without log α "
        "clamped.",
        main=True),
    "authors_code": Folder(
        "MNIST cells trained with the authors' code",
        "Final numbers of four MNIST cells trained by the authors' implementation "
        "(`benchmarks/authors_training.py`); no notebooks."),
    "pruning_variants": Folder(
        "Magnitude-pruning variants of one dense model",
        "Pruned copies of one dense MNIST model by initialisation and pruning rule "
        "(`benchmarks/pruning_variants.py`); no notebooks."),
    "settings_study": Folder(
        "Gates' and dual settings for ConstrainedStep on torchvision models",
        "resnet18 and mobilenet_v2 on CIFAR-10, 400 steps at a 50% density target, one JSON file a run "
        "(`benchmarks/settings_study.py`); no notebooks."),
}


def folder(experiment: str) -> Folder:
    """How the run indexes present the experiment folder ``experiment`` (:data:`FOLDERS`)."""
    if experiment not in FOLDERS:
        raise KeyError(f"runs/{experiment} has no title: add it to studies.FOLDERS")
    return FOLDERS[experiment]


def folder_studies(experiment: str) -> list[str]:
    """The studies whose grids write to the experiment folder ``experiment``, in the order of :data:`STUDIES`."""
    return [name for name, item in STUDIES.items() if experiment in item.experiments]


def folder_pages(experiment: str) -> list[str]:
    """The result pages that show the runs of ``experiment`` (``["results_mnist"]``), each once."""
    return list(dict.fromkeys(STUDIES[name].page for name in folder_studies(experiment)))


def folder_refs(experiment: str) -> list[str]:
    """The paper's tables and figures whose studies write to ``experiment`` (``["Table 10"]``), each once."""
    from ..paper import paper_numbers

    return list(dict.fromkeys(paper_numbers.ref(name) for name in folder_studies(experiment)
                              if name in TABLES or name in FIGURES))


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


def indexed_experiments(index: str) -> list[str]:
    """The experiment folders whose runs the run index ``index`` (``runs_mnist``) lists: those of every study shown on
    its pages, in the order of :data:`STUDIES`."""
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
