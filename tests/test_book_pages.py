"""The book's executable pages (results and teaching) run top to bottom, on the records committed in runs/."""

import re
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in (ROOT / "book").glob("*.md") if "{code-cell}" in p.read_text())
# A code cell's body after its directive options (":tags: [hide-input]" lines).
CODE_CELL = re.compile(r"```\{code-cell\}[^\n]*\n(?::[^\n]*\n)*(.*?)```", re.DOTALL)


#: The pages whose figures must be readable at the book's width (the result pages; the intro's figure is
#: drawn at its own width, see book/analysis/intro.py).
READABLE_PAGES = {p.name for p in (ROOT / "book").glob("results_*.md")} | {"lenet5_collapse.md", "errata.md"}
# A figure artist's label that names the paper's numbers ("paper", "paper, final ...", "paper: ..."), not one of
# our runs at the paper's protocol.
PAPER_LABEL = re.compile(r"^paper(?! protocol)\b")


def _figure_problems(figure, readable: bool) -> list[str]:
    """What a page's figure does against the book's style (book/analysis/style.py): an artist labelled as the
    paper's that is not black and hollow, one labelled as ours that is not blue (or, where colour stands for
    another variable, one of style.OTHER_COLOURS); with ``readable``, text under style.MIN_FONT_SIZE points at
    the size the page shows it."""
    from matplotlib.colors import to_rgba
    from analysis import style

    problems, title = [], (figure._suptitle.get_text() if figure._suptitle else "") or str(figure.axes[:1])
    allowed_ours = {to_rgba(style.OURS["color"])} | {to_rgba(c) for c in style.OTHER_COLOURS}
    artists = [a for ax in figure.axes for a in (*ax.lines, *ax.collections)]
    artists += [h for legend in [*figure.legends, *(ax.get_legend() for ax in figure.axes)] if legend
                for h in legend.legend_handles]
    for artist in artists:
        label = str(artist.get_label())
        if label.startswith("_"):
            continue
        if hasattr(artist, "get_edgecolor") and not hasattr(artist, "get_markeredgecolor"):  # a scatter's points
            edges, faces = artist.get_edgecolor(), artist.get_facecolor()
            colour = tuple(edges[0]) if len(edges) else None
            filled = len(faces) > 0 and faces[0][3] > 0
        else:
            colour = to_rgba(artist.get_markeredgecolor() if artist.get_marker() not in ("None", "", None)
                             else artist.get_color())
            face = artist.get_markerfacecolor()
            filled = artist.get_marker() not in ("None", "", None) and face not in ("none", "None") \
                and to_rgba(face)[3] > 0
        has_marker = not hasattr(artist, "get_marker") or artist.get_marker() not in ("None", "", None)
        if PAPER_LABEL.match(label):
            if colour is not None and colour[:3] != to_rgba(style.PAPER["color"])[:3]:
                problems.append(f"{title}: {label!r} is the paper's but not in its colour")
            if has_marker and filled:
                problems.append(f"{title}: {label!r} is the paper's but its marker is filled")
        elif label.startswith("ours") and colour is not None and colour[:3] not in {c[:3] for c in allowed_ours}:
            problems.append(f"{title}: {label!r} is ours but not in our colour")
    if readable:
        small = [(text, size) for text, size in style.displayed_font_sizes(figure) if size < style.MIN_FONT_SIZE - 1e-6]
        problems += [f"{title}: text {text!r} at {size:.1f} pt as shown" for text, size in small[:5]]
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_runs(page, monkeypatch):
    """The page runs top to bottom; every figure it draws takes the paper's and our looks from the style module
    and, on a result page, is readable at the book's width."""
    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT / "book")  # where jupyter-book executes the page
    monkeypatch.syspath_prepend(str(ROOT / "book"))  # its kernel imports from there: book/analysis
    monkeypatch.delenv("PAPERLIB_RUNS", raising=False)
    import matplotlib.pyplot as pyplot

    close = pyplot.close
    problems = []

    def check_then_close(figure=None):
        figures = [pyplot.figure(n) for n in pyplot.get_fignums()] if figure in (None, "all") else \
            [figure if hasattr(figure, "axes") else pyplot.figure(figure)]
        for shown in figures:
            problems.extend(_figure_problems(shown, page.name in READABLE_PAGES))
        close(figure) if figure is not None else close()

    monkeypatch.setattr(pyplot, "close", check_then_close)
    import myst_nb

    glued = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: glued.__setitem__(name, value))
    text = page.read_text()
    cells = CODE_CELL.findall(text)
    assert cells, f"{page.name} has no code cells"
    namespace = {}
    for cell in cells:
        exec(compile(cell, str(page), "exec"), namespace)
    check_then_close("all")
    assert not problems, "\n".join(problems)
    for key, spec in GLUE_ROLE.findall(text):
        assert key in glued, f"{page.name} shows {key!r}, which no cell glues"
        if spec:  # MyST-NB formats the glued text/plain, the value's repr, as a float: np.float64(1.0) fails
            float(repr(glued[key]))


#: A {glue:text} role of the prose: its key and its format spec (after a colon), if any.
GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]+))?`")


RESULT_PAGES = sorted((ROOT / "book").glob("results_*.md"))


@pytest.mark.parametrize("page", RESULT_PAGES, ids=lambda p: p.name)
def test_result_pages_hide_their_code(page):
    """Readers scan tables and figures; the report code stays one click away (tag hide-input)."""
    headers = re.findall(r"```\{code-cell\}[^\n]*\n((?::[^\n]*\n)*)", page.read_text())
    assert headers and all("hide-input" in header for header in headers)


TEACHING = [ROOT / "book" / f"{name}.ipynb" for name in ("lagrangian", "gates", "purging")]


@pytest.mark.parametrize("notebook", TEACHING, ids=lambda p: p.name)
def test_teaching_pages_fold_their_code_and_end_with_exercises(notebook):
    """Every code cell is folded or removed, and the page ends with 2-3 exercises whose solutions fold."""
    import json

    cells = json.loads(notebook.read_text())["cells"]
    folded = {"hide-input", "remove-input", "remove-cell"}
    shown = [i for i, c in enumerate(cells)
             if c["cell_type"] == "code" and not folded & set(c["metadata"].get("tags", []))]
    assert not shown, f"{notebook.name}: code cells {shown} show their code (tag them hide-input)"
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    start = next(i for i, text in enumerate(markdown) if re.search(r"^## Exercises$", text, re.M))
    exercises = "\n".join(markdown[start:])
    solutions = re.findall(r"^:::\{admonition\} Solution\n:class: dropdown$", exercises, re.M)
    assert 2 <= len(re.findall(r"^\*\*Exercise \d", exercises, re.M)) == len(solutions) <= 3


RUN_COMMAND = re.compile(r"python -m paperlib\.harness\.run ([^`\n]+)`")


def test_every_run_command_a_page_names_resolves_to_a_configuration():
    """A command a page gives for a run it did not make must run as written: its parameters parse and its preset
    knows the dataset and model (a command without ``dataset=cifar10`` fails on a WideResNet)."""
    from paperlib.harness.presets import resolve_config
    from paperlib.harness.run import parse

    commands = [match for page in (ROOT / "book").glob("*.md") for match in RUN_COMMAND.findall(page.read_text())]
    assert commands, "no page names a paperlib.harness.run command: the pattern no longer finds them"
    for command in commands:
        resolve_config(**parse(command.split()))


# --- what a page's prose says: one name per protocol, no run's plumbing, a box to reproduce it ---------------

FENCED = re.compile(r"^(`{3,}|:{3,}).*?^\1\s*$", re.M | re.S)
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def prose(page: Path, commands: bool = False) -> str:
    """A page's prose: its source without front matter, code cells, fenced blocks and admonitions (``:::``, the
    boxes of commands), and, unless ``commands``, without the inline code that is a command, a path or an
    assignment (``preset=cpu``)."""
    text = FENCED.sub("", FRONT_MATTER.sub("", page.read_text()))
    if commands:
        return text
    return INLINE_CODE.sub(lambda span: "" if re.search(r"[\s=/.]", span.group(0)) else span.group(0), text)


#: The ways of naming a protocol other than by its one name (paperlib.harness.protocols), each with why.
BANNED_PROTOCOL_WORDS = {
    r"(?i)\b(?:CPU|GPU|the|our|a|its) stand-ins?\b": "the CPU protocol (or the pilot protocol), not a stand-in",
    r"`cpu2?`": "a protocol's name, not its preset's",
    r"(?<![\w`=/-])cpu2?(?![\w`=/-])": "a protocol's name, not its preset's",
    r"(?i)\b(?:earlier|old|today's) (?:`?cpu2?`? )?presets?\b": "'superseded settings' or the protocol's name",
    r"(?i)\bpaper`? presets?\b": "the paper protocol",
}
#: Words of a run in progress: a page reads in the present tense about its results.
IN_PROGRESS_WORDS = (r"(?i)as they land", r"(?i)when it is in\b", r"(?i)lost with its machine", r"(?i)issues landed")
BOOK_PAGES = sorted((ROOT / "book").glob("*.md"))


def banned(text: str) -> list[str]:
    """Every banned naming of a protocol and every in-progress phrase in ``text``, with why."""
    found = [f"{match.group(0)!r} ({why})" for pattern, why in BANNED_PROTOCOL_WORDS.items()
             for match in re.finditer(pattern, text)]
    return found + [repr(match.group(0)) for pattern in IN_PROGRESS_WORDS for match in re.finditer(pattern, text)]


@pytest.mark.parametrize("page", BOOK_PAGES, ids=lambda p: p.name)
def test_prose_names_each_protocol_by_its_one_name(page):
    """Outside code, a page names a protocol only as paperlib.harness.protocols does ("CPU protocol", "pilot
    protocol", "short protocol", "paper protocol", "GPU protocol"), and reads in the present tense."""
    found = banned(prose(page))
    assert not found, f"{page.name}: " + "; ".join(found)


def test_the_prose_check_finds_what_it_bans_and_leaves_code_alone(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("---\nkernelspec: {}\n---\nAt the `cpu2` protocol, as the CPU stand-in and the old cpu preset,\n"
                    "our `paper` preset; on stand-in tensors. Runs join the table as they land.\n"
                    "`python -m paperlib.harness.run preset=cpu` and `grids/cifar10.yaml` are commands.\n"
                    "```{code-cell} ipython3\nglue('cpu', 1)\n```\n:::{admonition} Box\n`preset=cpu2`\n:::\n")
    found = banned(prose(page))  # "old cpu preset" twice: as a preset named as old, and as a bare preset name
    assert len(found) == 6 and all(any(word in f for f in found) for word in ("stand-in", "`cpu2`", "old cpu preset",
                                                                               "paper` preset", "as they land"))
    assert banned("At the CPU protocol and the pilot protocol, on a CPU; the paper protocol's settings.") == []
    assert "grids/cifar10.yaml" in prose(page, commands=True) and "glue" not in prose(page, commands=True)


STUDY_PAGES = sorted({study.page for study in __import__("paperlib.harness.studies", fromlist=["STUDIES"]).STUDIES.values()})


@pytest.mark.parametrize("name", STUDY_PAGES)
def test_a_result_page_ends_with_the_box_that_reproduces_its_studies(name):
    """The page's last block is a "Reproduce this page" admonition whose sweep names the studies shown on the
    page (paperlib.harness.studies) and lists their grid files; the prose outside it names no grid file and
    no file:line of our code."""
    from paperlib.harness import studies

    page = ROOT / "book" / f"{name}.md"
    box = re.search(r"^:::\{admonition\} Reproduce this page\n(.*?)^:::\s*\Z", page.read_text(), re.M | re.S)
    assert box, f"{name}.md does not end with a 'Reproduce this page' admonition"
    mine = [key for key, study in studies.STUDIES.items() if study.page == name]
    sweep = re.search(r"python -m paperlib\.harness\.sweeps (.+?) --workers 2 --commit", box.group(1))
    assert sweep and sorted(sweep.group(1).split()) == sorted(mine), f"{name}: the box's sweep is not {mine}"
    assert sorted(set(re.findall(r"grids/[\w.-]+\.yaml", box.group(1)))) == sorted(studies.grids(*mine))
    plumbing = re.findall(r"grids/[\w{},.-]+\.yaml|\bpaperlib/[\w/]+\.py\b|\b\w+\.py:\d+",
                          prose(page, commands=True))
    assert not plumbing, f"{name}: {plumbing} in the prose"
