"""analysis.style: the paper's look and ours, defined once and taken from there by every figure."""

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from analysis import style  # noqa: E402

ANALYSIS = Path(__file__).resolve().parents[1] / "book" / "analysis"


def test_the_paper_is_black_and_hollow_ours_blue_and_filled_and_grouping_is_a_marker_shape():
    paper, ours = style.scatter("paper", "layer"), style.scatter("ours", "layer")
    assert paper["facecolors"] == "none" and to_rgba(paper["edgecolors"]) == to_rgba("black")
    assert to_rgba(ours["facecolors"]) == to_rgba(ours["edgecolors"]) != to_rgba("black")
    assert paper["marker"] == ours["marker"] == style.GROUPING_MARKERS["layer"] != style.GROUPING_MARKERS["model"]
    assert style.line("paper")["linestyle"] != style.line("ours")["linestyle"]
    assert style.point("ours", marker_shape="s")["linestyle"] == "none"
    handle = style.handle("paper", "paper, layer-wise", "layer")
    assert handle.get_markerfacecolor() == "none" and handle.get_label() == "paper, layer-wise"
    assert to_rgba(style.OURS["color"]) not in {to_rgba(c) for c in style.OTHER_COLOURS} | {to_rgba("black")}


def test_text_is_measured_at_the_size_the_page_shows_the_figure():
    for width, shown in ((7, 10.0), (14, 5.0)):
        fig, ax = plt.subplots(figsize=(width, 3))
        ax.set_xlabel("epoch", fontsize=10)
        assert dict(style.displayed_font_sizes(fig))["epoch"] == shown
        plt.close(fig)



def test_a_legend_below_takes_an_axes_labelled_lines_or_handles_and_leaves_room_for_itself():
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot([0, 1], [0, 1], label="ours")
    ax.plot([0, 1], [1, 0], label="_hidden")
    style.legend_below(fig, ax)
    legend = fig.legends[-1]
    assert [text.get_text() for text in legend.get_texts()] == ["ours"] and legend._loc == 9  # upper center
    style.legend_below(fig, [style.handle("paper", "paper")], ncol=1, bottom=0.2)
    assert [text.get_text() for text in fig.legends[-1].get_texts()] == ["paper"] and fig.legends[-1]._loc == 8
    assert ax.get_position().y0 >= 0.2  # the axes sit above the legend's share
    plt.close(fig)

# A module's own table of the paper's or our colour ("paper": "C1", "ours": ("tab:orange", "o")); the dual
# optimisers' page calls the paper's dual optimiser, which we run, "paper": its key is an optimiser, not a source.
OWN_SOURCE_COLOURS = re.compile(r"""["'](?:paper|ours)["']\s*:\s*\(?\s*["'](?:C\d|tab:\w+|black|k|0?\.\d+|#[0-9a-fA-F]{6})["']""")
NOT_A_SOURCE = {"dual_findings.py"}


def test_no_figure_module_defines_its_own_colour_for_the_paper_or_ours():
    found = {path.name: OWN_SOURCE_COLOURS.findall(path.read_text()) for path in ANALYSIS.glob("*.py")
             if path.name not in {"style.py", *NOT_A_SOURCE}}
    assert not {name: hits for name, hits in found.items() if hits}, "take the paper's and our looks from analysis.style"
