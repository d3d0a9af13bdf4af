"""The transcription of the paper's results (paperlib/paper/paper_results.csv) against the LaTeX source."""

import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from paperlib.paper.paper_results import KEY_COLUMNS, paper_cell, paper_results

TEX = Path(__file__).resolve().parents[1].parent / "shared" / "paper" / "controlled_sparsity.tex"
if not TEX.is_file():
    pytest.skip(f"the paper's LaTeX source is not at {TEX} (../shared/paper/controlled_sparsity.tex "
                "relative to the repository root)", allow_module_level=True)

LINES = TEX.read_text(encoding="utf-8").split("\n")
LABELS = set(re.findall(r"\\label\{([^}]*)\}", "\n".join(LINES)))

COLUMNS = ["table", "source_kind", "repeat_of", "caption_short", "dataset", "model", "method", "sparsity",
           "grouping", "target", "lmbda", "gates_lr", "variant", "finetune_epochs", "metric", "qualifier",
           "value", "ci", "unit", "epochs", "n_runs", "source_line", "authors_check", "note"]
# Tables with settings only, no results.
NOT_RESULTS = {"tab:gates_params", "tab:optim_mnist", "tab:optim_wrn", "tab:optim_r18", "tab:optim_r50",
               "tab:optim_mnist_unstructured", "tab:optim_tiny_unstructured"}


@pytest.fixture(scope="module")
def df():
    return paper_results()


def _line(n: int) -> str:
    """Line n of the .tex with LaTeX spacing commands reduced to plain spaces."""
    return re.sub(r"\s+", " ", LINES[n - 1].replace("\\;", " ").replace("\\,", " "))


def _number(text: str) -> str:
    """Regex for `text` as a whole printed token (not part of a longer number)."""
    return r"(?<![\d.])" + re.escape(text) + r"(?!\d|\.\d)"


# ------------------------------------------------------------------ (1) values on their lines

def test_every_value_and_ci_is_on_its_source_line(df):
    assert len(df) >= 40 and df["table"].nunique() >= 15
    bad = []
    for r in df.itertuples():
        line = _line(r.source_line)
        if r.ci:
            pattern = _number(r.value) + r"[^&]{0,40}?\\pm\$?\s*" + re.escape(r.ci) + r"(?!\d)"
        else:
            pattern = _number(r.value)
        if not re.search(pattern, line):
            bad.append(f"{r.table} line {r.source_line}: {r.metric}={r.value!r} ci={r.ci!r} not in {line.strip()[:120]!r}")
    assert not bad, "\n".join(bad)


def test_sample_of_cells_by_hand(df):
    # Cells read off the .tex by hand, independently of how the CSV was built; one or more per table.
    expected = [
        (dict(table="tab:mnist", model="MLP", method="constrained", grouping="model", metric="val_error_final"), "1.77", "0.08"),
        (dict(table="tab:mnist", model="LeNet5", method="louizos", grouping="layer", metric="pruned_architecture"), "9-18-65-25", ""),
        (dict(table="tab:mlp_control", method="penalized", grouping="model", lmbda="0.1", metric="params_pct"), "62.37", "0.3"),
        (dict(table="tab:lenet_control", method="penalized", grouping="model", lmbda="0.001", metric="params_pct"), "100", "0.00"),
        (dict(table="tab:cifar10_control", method="penalized", grouping="layer", lmbda="1", metric="status"), "Failed due to sparsity collapse", ""),
        (dict(table="tab:cifar100_control", method="constrained", grouping="layer", target="0.8", metric="l0_density"), "79.82", "0.15"),
        (dict(table="app:all_comparisons:tiny_imagenet", method="penalized", grouping="model", lmbda="0.0001", metric="val_error_final"), "41.05", "0.33"),
        (dict(table="tab:cifar10", method="louizos", lmbda="0.002/N", metric="val_error_best"), "3.93", ""),
        (dict(table="tab:cifar100", method="penalized", lmbda="0.001", gates_lr="0.1", metric="params_pct"), "100.00", "0.00"),
        (dict(table="tab:mp_comparison_imagenet", method="magnitude_pruning", target="0.3", finetune_epochs="20", metric="val_error_best"), "34.74", ""),
        (dict(table="tab:mp_comparison_imagenet_APPENDIX", method="dense", metric="val_error_best"), "23.90", ""),
        (dict(table="tab:mnist_unstructured_comparison_mlp", method="magnitude_pruning", target="0.01", finetune_epochs="200", metric="val_error_best"), "55.45", ""),
        (dict(table="tab:mnist_unstructured_comparison_lenet", method="constrained", target="0.01", metric="l0_density"), "1.55", ""),
        (dict(table="tab:tiny_unstructured_comparison", method="constrained", target="0.05", metric="val_error_best"), "43.98", ""),
        (dict(table="tab:model_stats", model="WideResNet-28-10", metric="macs_count"), "5,959M", ""),
        (dict(table="app:exp_details:imagenet", variant="rho_init=0.3", metric="initial_l0_density"), "92.03", ""),
    ]
    for keys, value, ci in expected:
        row = paper_cell(**keys)
        assert (row["value"], row["ci"]) == (value, ci), keys


def test_no_printed_number_is_left_out(df):
    """Every number on every data line of a transcribed table is a value, CI or printed key of some row."""
    rows = df[df["source_kind"] == "table"]
    by_line = {n: g for n, g in rows.groupby("source_line")}
    problems = []
    for table, g in rows.groupby("table"):
        first = g["source_line"].min()
        start = max(i for i in range(1, first) if LINES[i - 1].strip() == "\\hline")
        end = next(i for i in range(first, len(LINES) + 1) if "\\end{tabular}" in LINES[i - 1])
        for n in range(start + 1, end):
            line = _line(n)
            for pat in (r"\\multirow\{\d+\}\{\*\}", r"\\multicolumn\{\d+\}\{[^}]*\}", r"\\cline\{[^}]*\}",
                        r"\\lambda_\{pen\}(\^g)?\s*=[^&$]*", r"\\epsilon(_g)?\s*=[^&$]*", r"g \\in \[1:\d+\]",
                        r"784-300-100|20-50-800-500|CIFAR-10/100"):
                line = re.sub(pat, " ", line)
            here = by_line.get(n)
            if here is not None:
                assert set(here["table"]) == {table}, f"line {n} holds rows of several tables"
                printed = list(here["value"]) + [c for c in here["ci"] if c] + [x for x in set(here["gates_lr"]) if x]
                for text in sorted(printed, key=len, reverse=True):
                    line, k = re.subn(_number(text), " ", line, count=1)
                    if not k:
                        problems.append(f"{table} line {n}: {text!r} not found")
            left = re.findall(r"(?<![\w.\-/\\])\d[\d,.]*", line)
            if left:
                problems.append(f"{table} line {n}: untranscribed number(s) {left}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ (2) schema

def test_schema(df):
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS
    assert {"value_num", "ci_num"} <= set(df.columns)
    for col in ("table", "source_kind", "method", "metric", "value"):
        assert (df[col] != "").all(), col
    tables = df[df["source_kind"] == "table"]
    for col in ("dataset", "model", "caption_short", "source_line"):
        assert (tables[col].astype(str) != "").all(), col
    assert set(df["source_kind"]) == {"table", "text", "figure_caption"}
    assert set(df["method"]) <= {"constrained", "penalized", "louizos", "dense", "magnitude_pruning"}
    assert set(df["sparsity"]) <= {"structured", "unstructured", ""}
    assert set(df["grouping"]) <= {"model", "layer", "none", ""}
    assert set(df["qualifier"]) <= {"", ">", "<", "~", ">="}
    assert set(df["authors_check"]) <= {"", "agrees", "truncated", "disagrees"}
    assert df["source_line"].between(1, len(LINES)).all()
    # Percentages are plain numbers, CIs too.
    assert df.loc[df["unit"] == "%", "value_num"].notna().all()
    assert df.loc[df["ci"] != "", "ci_num"].notna().all()
    # Targets are fractions in (0, 1].
    for t in df["target"][df["target"] != ""]:
        assert all(0 < float(x) <= 1 for x in t.split()), t
    # A disagreement with the authors' numbers is always explained in the note.
    assert (df["note"].str.contains("DISAGREES") == (df["authors_check"] == "disagrees")).all()


def test_labels_exist_and_every_result_table_is_transcribed(df):
    assert set(df["table"]) <= LABELS, set(df["table"]) - LABELS
    assert set(df["repeat_of"]) - {""} <= LABELS
    result_tables = {lab for lab in LABELS if lab.startswith("tab:")} - NOT_RESULTS
    assert result_tables <= set(df["table"]), result_tables - set(df["table"])


def test_no_duplicate_keys(df):
    keys = df[list(KEY_COLUMNS)].astype(str).agg("|".join, axis=1)
    dup = [k for k, n in Counter(keys).items() if n > 1]
    assert not dup, dup


def test_appendix_repeats_match_their_main_tables(df):
    other = [c for c in KEY_COLUMNS if c != "table"]
    for appendix, g in df[df["repeat_of"] != ""].groupby("table"):
        main = df[df["table"] == g["repeat_of"].iloc[0]]
        a = g.set_index(other)[["value", "ci"]].sort_index()
        m = main.set_index(other)[["value", "ci"]].sort_index()
        pd.testing.assert_frame_equal(a, m, obj=appendix)


# ------------------------------------------------------------------ (3) paper_cell

def test_paper_cell_returns_the_one_row():
    row = paper_cell("tab:mnist", model="LeNet5", grouping="layer", method="constrained", metric="val_error_final")
    assert (row["value"], row["ci"], row["target"]) == ("0.91", "0.05", "0.5 0.3 0.7 0.1")
    row = paper_cell("tab:mlp_control", method="constrained", grouping="model", target=0.5, metric="l0_density")
    assert row["value"] == "50.89" and row["value_num"] == pytest.approx(50.89)


def test_paper_cell_raises_on_ambiguous_keys():
    with pytest.raises(ValueError, match=r"paper cells match table='tab:mlp_control', metric='l0_density'"):
        paper_cell("tab:mlp_control", metric="l0_density")


def test_paper_cell_raises_on_missing_keys():
    with pytest.raises(ValueError, match=r"no paper cell matches table='tab:mlp_control', target='0.99'"):
        paper_cell("tab:mlp_control", target="0.99")
    with pytest.raises(ValueError, match="no paper cell matches table='tab:nope'"):
        paper_cell("tab:nope")


def test_paper_cell_raises_on_unknown_column():
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['density'\]"):
        paper_cell("tab:mlp_control", density="0.5")
