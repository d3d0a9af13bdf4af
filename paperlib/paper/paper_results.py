"""Every result number the paper prints, as one tidy table (``paper_results.csv``).

The file holds one row per printed cell of the result tables of "Controlled Sparsity
via Constrained Optimization" (Gallego-Posada et al., NeurIPS 2022), transcribed from
its LaTeX source (``controlled_sparsity.tex``), plus the few numbers that the text or a
figure caption states as results. Values are exactly as printed: nothing is rounded
or recomputed, and a number the paper gets wrong stays wrong (the ``note`` says so).

Tables transcribed (``table`` is the LaTeX ``\\label``)
    tab:mnist (Table 1) and its appendix repeat tab:mnist_APPENDIX; tab:mlp_control,
    tab:lenet_control; tab:cifar10, tab:cifar100 (gate learning-rate comparison);
    tab:cifar10_control, tab:cifar100_control; the TinyImageNet table, which has no
    ``\\label`` in the source and is filed under its subsection's label
    ``app:all_comparisons:tiny_imagenet``; tab:mp_comparison_imagenet and its repeat
    tab:mp_comparison_imagenet_APPENDIX (constrained, L1 magnitude pruning, dense
    baseline); tab:model_stats (dense parameters and MACs); the unstructured tables
    of App. L (tab:mnist_unstructured_comparison_mlp, ..._lenet,
    tab:tiny_unstructured_comparison). Result numbers stated in the text or a figure
    caption are filed under the figure's label, or under the label of the section
    they appear in, with ``source_kind`` ``text`` or ``figure_caption``. These are the
    density claims about Fig. 1, the bisection count (App. E), the gate-median
    histograms (App. I), the initial densities for rho_init
    (app:exp_details:imagenet), the ImageNet model- vs layer-wise comparison, the 95%
    sparsity of App. L.2 and the "5 active parameters" of App. L.3.
    Not transcribed: the hyper-parameter tables (tab:gates_params, tab:optim_*), which
    hold settings and no results; figures, whose plotted points the paper does not
    print; setup numbers in the text (targets, epochs, layer counts).

Columns
    table, source_kind (table | text | figure_caption), repeat_of (the main-text label
    an appendix table repeats), caption_short, dataset, model, method (constrained |
    penalized | louizos [penalized results quoted from Louizos et al. 2018] | dense |
    magnitude_pruning), sparsity (structured | unstructured), grouping (model | layer
    | none), target (target density as a fraction, e.g. ``0.33``; layer-specific lists
    are space-separated in layer order, e.g. ``0.5 0.3 0.7 0.1``; a single value with
    grouping ``layer`` means that target for every layer), lmbda (penalty as printed,
    e.g. ``0.1``, ``0.1/N``, ``[10,0.5,0.1,0.1]/N``), gates_lr (only where the table
    prints it), variant (free text where the other keys do not tell two rows apart),
    finetune_epochs (the "after fine-tuning for # epochs" column; 0 for constrained and
    dense models, which are not fine-tuned), metric (l0_density, params_pct, macs_pct,
    val_error_best, val_error_final, pruned_architecture, params_count, macs_count,
    input_size, train_set_size, status, ...), qualifier (``>``, ``<``, ``~``, ``>=``
    for approximate or bounded statements in the text), value and ci (text exactly as
    printed; ci is the printed +- 95% confidence interval, which the authors' code
    computes as 1.96 std / sqrt(n)), unit, epochs (training epochs stated by the
    table's caption or header), n_runs (runs stated by the caption), source_line
    (1-based line of the .tex where the value is printed), authors_check (see below)
    and note. Cells printed as dashes are not listed. A cell that spans several
    columns ("Failed due to sparsity collapse") is one row with metric ``status``.

How it was checked
    ``tests/test_paper_results.py`` checks every value and CI against its
    ``source_line``. For every table line it also checks that no printed number is
    left untranscribed, and that the appendix repeats equal their main-text tables.
    The cells below were also compared with the authors' unrounded aggregates in
    their public repository (``get_results/saved_dataframes/*_normalized.csv`` and
    ``all_models_stats.csv``, not copied here). The comparison covered tab:mnist and
    tab:mnist_APPENDIX (constrained rows, from mlp_table and lenet_table), the four
    control tables and the TinyImageNet table (from \\*_control), tab:cifar10 and
    tab:cifar100 (from \\*_table, Louizos rows excepted), the constrained rows of both
    ImageNet tables and of the ImageNet text (from imagenet_table), and
    tab:model_stats with the ImageNet baseline (from all_models_stats). That is
    638 cells, including every printed CI. ``authors_check`` records the result:
    ``agrees`` (within half a unit of the last printed digit), ``truncated`` (the
    paper cut the digits instead of rounding them), ``disagrees``, or empty (no
    authors' number covers the cell: Louizos rows, pruned architectures, magnitude
    pruning, unstructured tables, most text numbers). Disagreements beyond rounding:

    - tab:lenet_control, penalized layer-wise lambda=1, best val. error: printed
      0.46, authors' CSV 1.46.
    - TinyImageNet table, constrained layer-wise 20%: L0-density printed 22.99,
      CSV 22.29; params printed 13.40, CSV 13.414.
    - tab:cifar10, constrained eps_g=100% with gate lr 0.1: L0-density printed
      92.34, CSV 92.301.
    - Both ImageNet tables, constrained layer-wise 90%: printed 90.58 / 87.07 /
      85.97, CSV 90.569 / 87.050 / 85.951.
    - tab:model_stats: the LeNet5 MACs are printed as 2,327M, but the CSV has
      2,327,130 (2.327M). The ResNet50 MACs are printed as 4,120M; the CSV has
      4,121,925,096.
    - Text of App. K.5 (.tex line 1683): the layer-wise params at eps=70% are given as
      61.19%, but both tables print 61.91 (CSV 61.909).

    The TinyImageNet table's header says "at 200 epochs" while its caption says 120.
"""

from importlib import resources

import pandas as pd

#: Columns that identify a cell; no two rows share all of them.
KEY_COLUMNS = ("table", "source_kind", "dataset", "model", "method", "sparsity", "grouping", "target",
               "lmbda", "gates_lr", "variant", "finetune_epochs", "metric")


def paper_results() -> pd.DataFrame:
    """The paper's printed results, one row per cell (see the module docstring).

    All columns are strings exactly as in the file (empty string when absent), except
    ``source_line`` (int). Two float columns are added: ``value_num`` and ``ci_num``,
    NaN where the printed text is not a plain number (e.g. ``219-214-100``, ``25.5M``).
    """
    with resources.files("paperlib.paper").joinpath("paper_results.csv").open("r", encoding="utf-8") as f:
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    df["source_line"] = df["source_line"].astype(int)
    df["value_num"] = pd.to_numeric(df["value"], errors="coerce")
    df["ci_num"] = pd.to_numeric(df["ci"], errors="coerce")
    return df


def paper_cell(table: str, **keys) -> pd.Series:
    """The one row of ``table`` whose columns equal ``keys`` (compared as text).

    Example: ``paper_cell("tab:mlp_control", method="constrained", grouping="model",
    target=0.5, metric="l0_density").value == "50.89"``. Raises ValueError naming the
    keys when no row or several rows match, or when a key is not a column.
    """
    df = paper_results()
    unknown = sorted(set(keys) - set(df.columns))
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the columns are {list(df.columns)}")
    mask = df["table"] == table
    for col, want in keys.items():
        mask &= df[col].astype(str) == ("" if want is None else str(want))
    hits = df[mask]
    if len(hits) == 1:
        return hits.iloc[0]
    asked = ", ".join(f"{k}={v!r}" for k, v in {"table": table, **keys}.items())
    if hits.empty:
        raise ValueError(f"no paper cell matches {asked}")
    differ = [c for c in KEY_COLUMNS if hits[c].nunique() > 1]
    raise ValueError(f"{len(hits)} paper cells match {asked}; they differ in {differ}")


def paper_runs(table: str) -> int | None:
    """How many runs each cell of ``table`` aggregates, as its caption says (``n_runs``); None when the paper
    does not say. A table whose cells differ (a dense baseline of one run beside means of 5) gives the most."""
    counts = paper_results().loc[lambda df: (df["table"] == table) & (df["n_runs"] != ""), "n_runs"].astype(int)
    return int(counts.max()) if len(counts) else None
