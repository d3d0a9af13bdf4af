"""How the book's figures draw the paper against ours, defined once.

Every figure of the result pages that sets the paper's numbers beside ours takes their look from here:

- the paper (its printed numbers, or the authors' aggregated results): black, hollow markers, dashed lines
  (:data:`PAPER`);
- ours (our records): blue, filled markers, solid lines (:data:`OURS`);
- the authors' published code run here (``runs/authors_code/``): a thick grey line (:data:`AUTHORS_CODE`).

Model-wise and layer-wise differ by marker shape (:data:`GROUPING_MARKERS`), never by fill, so that a filled
marker always means ours and a hollow one the paper's. Other variables a figure needs (a target, λ_pen, a
dual optimiser) take the line style or a colour of their own, never black or blue for a source.

Text on a figure is at least :data:`MIN_FONT_SIZE` points at the size the page displays it
(:func:`displayed_font_sizes`).
"""

from matplotlib.lines import Line2D

#: The paper's look.
PAPER = {"color": "black", "marker": "D", "fill": "none", "linestyle": "--"}
#: Ours.
OURS = {"color": "tab:blue", "marker": "o", "fill": "tab:blue", "linestyle": "-"}
#: The authors' published code, run here.
AUTHORS_CODE = {"color": "0.55", "marker": "o", "fill": "0.55", "linestyle": "-", "linewidth": 2.5}
SOURCES = {"paper": PAPER, "ours": OURS, "authors' code": AUTHORS_CODE}
#: Marker shape per grouping, the same for the paper's points and ours.
GROUPING_MARKERS = {"model": "o", "layer": "^"}
#: Line styles of our variants of one run beside the paper's (which is dashed): the run as the book's protocol
#: trains it, with the authors' fan-out initialisation, with log α clamped.
OURS_VARIANTS = {"": "-", "fan-out": "-.", "clamped": ":"}
#: A target drawn beside the paper's numbers: thin, grey and dotted, neither the paper's nor ours.
TARGET = {"color": "0.45", "linestyle": ":", "linewidth": 1.0}
#: Colours for another variable of a figure that also shows a source (λ_pen, a target): neither black nor blue.
OTHER_COLOURS = ("tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")

#: The smallest font size (points) of any text a figure shows, at the size the page displays it.
MIN_FONT_SIZE = 9
#: The widest a page shows a figure, in inches at the figure's dpi of 100 (the book's text column at 1280 px);
#: a wider figure is scaled down to it, its text with it.
DISPLAYED_WIDTH = 7.0


def _source(source: str) -> dict:
    if source not in SOURCES:
        raise KeyError(f"no style for {source!r}; the sources: {', '.join(SOURCES)}")
    return SOURCES[source]


def scatter(source: str, grouping: str | None = None, **more) -> dict:
    """Keyword arguments of ``Axes.scatter`` for ``source`` (``"paper"`` or ``"ours"``), with the marker of
    ``grouping`` if given: ``ax.scatter(x, y, **style.scatter("paper", "layer"))``."""
    look = _source(source)
    return {"marker": _marker(look, grouping, more.pop("marker_shape", None)), "edgecolors": look["color"], "facecolors": look["fill"], "linewidths": 1.3,
            "zorder": 3 if source == "paper" else 2, **more}


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


def displayed_font_sizes(figure) -> list[tuple[str, float]]:
    """Every visible non-empty text of ``figure`` (titles, labels, tick labels, legends, annotations) with its
    font size in points at the size the page displays the figure: scaled down by the figure's width over
    :data:`DISPLAYED_WIDTH` where it is wider."""
    scale = min(1.0, DISPLAYED_WIDTH / figure.get_figwidth())
    figure.canvas.draw()  # tick labels exist once drawn
    texts = [text for text in figure.findobj(lambda artist: hasattr(artist, "get_fontsize")
                                             and hasattr(artist, "get_text"))
             if text.get_visible() and text.get_text().strip()]
    return [(text.get_text(), text.get_fontsize() * scale) for text in texts]
