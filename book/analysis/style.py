"""How the book's figures draw the paper against ours, defined once: the paper black, hollow, dashed
(:data:`PAPER`); ours blue, filled, solid (:data:`OURS`); the authors' code run here a thick grey line. Groupings
differ by marker shape, never by fill; other variables take a line style or colour of their own, never black or
blue. Text is at least :data:`MIN_FONT_SIZE` points as the page displays it (:func:`displayed_font_sizes`).
"""

from matplotlib.axes import Axes
from matplotlib.lines import Line2D

PAPER = {"color": "black", "marker": "D", "fill": "none", "linestyle": "--"}
OURS = {"color": "tab:blue", "marker": "o", "fill": "tab:blue", "linestyle": "-"}
AUTHORS_CODE = {"color": "0.55", "marker": "o", "fill": "0.55", "linestyle": "-", "linewidth": 2.5}
SOURCES = {"paper": PAPER, "ours": OURS, "authors' code": AUTHORS_CODE}
#: Marker shape per grouping, the same for the paper's points and ours.
GROUPING_MARKERS = {"model": "o", "layer": "^"}
#: Line styles of our variants of one run beside the paper's (dashed): as is, fan-out initialised, log α clamped.
OURS_VARIANTS = {"": "-", "fan-out": "-.", "clamped": ":"}
#: A target drawn beside the paper's numbers: thin, grey and dotted, neither the paper's nor ours.
TARGET = {"color": "0.45", "linestyle": ":", "linewidth": 1.0}
#: Colours for another variable of a figure that also shows a source (λ_pen, a target): neither black nor blue.
OTHER_COLOURS = ("tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")

MIN_FONT_SIZE = 9
#: The widest a page shows a figure (inches at 100 dpi: the text column at 1280 px); a wider one is scaled down.
DISPLAYED_WIDTH = 7.0


def _source(source: str) -> dict:
    if source not in SOURCES:
        raise KeyError(f"no style for {source!r}; the sources: {', '.join(SOURCES)}")
    return SOURCES[source]


def scatter(source: str, grouping: str | None = None, **more) -> dict:
    """Keyword arguments of ``Axes.scatter`` for ``source`` (``"paper"`` or ``"ours"``), with the marker of
    ``grouping`` if given: ``ax.scatter(x, y, **style.scatter("paper", "layer"))``."""
    look = _source(source)
    return {"marker": _marker(look, grouping, more.pop("marker_shape", None)), "edgecolors": look["color"],
            "facecolors": look["fill"], "linewidths": 1.3, "zorder": 3 if source == "paper" else 2, **more}


def _marker(look: dict, grouping: str | None, marker_shape: str | None) -> str:
    return marker_shape or (GROUPING_MARKERS[grouping] if grouping else look["marker"])


def line(source: str, marker: bool = False, grouping: str | None = None, marker_shape: str | None = None,
         **more) -> dict:
    """Keyword arguments of ``Axes.plot`` for a line of ``source``, with its markers if ``marker`` (of
    ``grouping``, or of the shape ``marker_shape`` where the shape stands for something else, a method say)."""
    look = _source(source)
    kwargs = {"color": look["color"], "linestyle": look["linestyle"], "linewidth": look.get("linewidth", 1.3)}
    if marker or grouping or marker_shape:
        kwargs.update(marker=_marker(look, grouping, marker_shape), markerfacecolor=look["fill"],
                      markeredgecolor=look["color"])
    return {**kwargs, **more}


def point(source: str, grouping: str | None = None, marker_shape: str | None = None, **more) -> dict:
    """Keyword arguments of ``Axes.plot`` for markers alone (no line) of ``source``."""
    return line(source, marker=True, grouping=grouping, marker_shape=marker_shape, **{"linestyle": "none", **more})


def handle(source: str, label: str, grouping: str | None = None, marker: bool = True, linestyle: bool = False,
           marker_shape: str | None = None) -> Line2D:
    """A legend entry of ``source``: its marker (of ``grouping`` or ``marker_shape`` if given), and its line if
    ``linestyle``."""
    look = _source(source)
    kwargs = {"color": look["color"], "label": label, "linestyle": look["linestyle"] if linestyle else "none",
              "linewidth": look.get("linewidth", 1.3)}
    if marker:
        kwargs.update(marker=_marker(look, grouping, marker_shape), markerfacecolor=look["fill"],
                      markeredgecolor=look["color"], markersize=7)
    return Line2D([], [], **kwargs)


def legend_below(fig, handles, ncol: int = 2, bottom: float | None = None) -> None:
    """A legend of ``handles`` (artists, each with its label; an Axes: its labelled ones) under a figure's axes,
    then a tight layout: in the lowest ``bottom`` share of the figure, or just below the figure if None."""
    if isinstance(handles, Axes):
        handles = handles.get_legend_handles_labels()[0]
    place = {"loc": "upper center", "bbox_to_anchor": (0.5, 0.02)} if bottom is None else {"loc": "lower center"}
    fig.legend(handles=handles, ncol=ncol, fontsize=9, frameon=False, **place)
    fig.tight_layout(rect=None if bottom is None else (0, bottom, 1, 1))


def displayed_font_sizes(figure) -> list[tuple[str, float]]:
    """Every visible non-empty text of ``figure`` with its font size (points) as the page displays it."""
    scale = min(1.0, DISPLAYED_WIDTH / figure.get_figwidth())
    figure.canvas.draw()  # tick labels exist once drawn
    texts = [text for text in figure.findobj(lambda artist: hasattr(artist, "get_fontsize")
                                             and hasattr(artist, "get_text"))
             if text.get_visible() and text.get_text().strip()]
    return [(text.get_text(), text.get_fontsize() * scale) for text in texts]
