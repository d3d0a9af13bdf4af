"""The numbers a reader of the paper's PDF sees for its LaTeX labels: ``tab:mnist`` is Table 1.

The book names the paper's tables, figures, equations, sections and appendices
by these numbers (:func:`ref`), never by LaTeX labels, and names no number the
paper does not give (:func:`unknown_references`, which the tests run over every
page). ``paper_numbers.csv`` beside this module holds every label with its
number, then every number without a label; it is made from the paper's LaTeX by
:func:`number_labels` (``python -m paperlib.paper.paper_numbers
../shared/paper/controlled_sparsity.tex`` rewrites it), and
``tests/test_paper_numbers.py`` checks it against the LaTeX where the LaTeX is
at hand.

:func:`number_labels` counts as LaTeX does for this paper (article class, the
``subfigure`` and ``caption`` packages), from ``\\begin{document}`` on: one
figure or table number per ``\\caption`` in a ``figure``/``table`` environment
and per ``\\captionof{figure|table}``; one equation number per ``equation`` and
per row of an ``align`` without ``\\nonumber`` (a label on an unnumbered row
names the next numbered one); sections 1, 2, ... and, after ``\\appendix``
(here inside ``\\appendixwithtoc``), appendices A, B, ...; a label takes the
number of the last of these before it in its scope.
"""

import csv
import re
import string
import sys
from functools import cache
from importlib import resources
from pathlib import Path

#: How the book writes each kind of number.
KINDS = {"section": "§", "appendix": "Appendix ", "table": "Table ", "figure": "Figure ", "equation": "Eq. "}

_TOKEN = re.compile(r"\\(?P<command>begin|end)\{(?P<env>[a-zA-Z*]+)\}"
                    r"|\\(?P<section>section|subsection|subsubsection)(?P<star>\*?)\s*[\[{]"
                    r"|\\(?P<appendix>appendix(?:withtoc)?)\b"
                    r"|\\(?P<captionof>captionof)\{(?P<float>figure|table)\}"
                    r"|\\(?P<caption>caption)\b"
                    r"|\\label\{(?P<label>[^}]+)\}"
                    r"|(?P<newline>\\\\)"
                    r"|\\(?P<nonumber>nonumber|notag)\b"
                    r"|(?P<comment>(?<!\\)%[^\n]*)")


def number_labels(tex: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str]]]:
    """Every ``\\label`` of the LaTeX source -> (kind, number), e.g. ``("table", "1")``, ``("appendix", "E")``,
    ``("section", "5.4")``, ``("equation", "9")``, ``("figure", "3")``; and every number the paper gives, with
    a label or without, in order."""
    counters = {"figure": 0, "table": 0, "equation": 0}
    sections = [0, 0, 0]
    appendix = False
    floats = []          # open figure/table environments
    equation = None      # the open equation environment: (env, labels of the current row, row is numbered)
    current = None       # the last (kind, number) a label outside a float or equation refers to
    in_float = None      # (kind, number) of the open float's last caption
    labels, given = {}, []

    def section_number(depth: int) -> str:
        first = string.ascii_uppercase[sections[0] - 1] if appendix else str(sections[0])
        return ".".join([first, *map(str, sections[1:depth + 1])])

    def close_row(last: bool = False):
        """End a row of the open equation; a label of an unnumbered row waits for the next numbered one."""
        nonlocal equation
        env, pending, numbered = equation
        if numbered:
            counters["equation"] += 1
            given.append(("equation", str(counters["equation"])))
        if numbered or last:
            for label in pending:
                labels[label] = ("equation", str(counters["equation"]))
            pending = []
        equation = (env, pending, True)

    start = tex.find("\\begin{document}")
    for match in _TOKEN.finditer(tex, max(start, 0)):
        if match["comment"]:
            continue
        if match["command"]:
            env = match["env"]
            if env in ("figure", "figure*", "table", "table*"):
                if match["command"] == "begin":
                    floats.append(env.rstrip("*"))
                    in_float = None
                else:
                    floats.pop()
                    in_float = None
            elif env in ("equation", "align"):
                if match["command"] == "begin":
                    equation = (env, [], True)
                else:
                    close_row(last=True)
                    equation = None
        elif match["section"]:
            if match["star"]:
                continue
            depth = {"section": 0, "subsection": 1, "subsubsection": 2}[match["section"]]
            sections[depth] += 1
            sections[depth + 1:] = [0] * (2 - depth)
            current = ("appendix" if appendix else "section", section_number(depth))
            given.append(current)
            in_float = None
        elif match["appendix"]:
            appendix, sections = True, [0, 0, 0]
        elif match["captionof"]:
            counters[match["float"]] += 1
            in_float = (match["float"], str(counters[match["float"]]))
            given.append(in_float)
            if not floats:
                current = in_float
        elif match["caption"] and floats:
            counters[floats[-1]] += 1
            in_float = (floats[-1], str(counters[floats[-1]]))
            given.append(in_float)
        elif match["label"]:
            label = match["label"]
            if equation is not None:
                equation[1].append(label)
            elif in_float is not None:
                labels[label] = in_float
            elif current is not None:
                labels[label] = current
        elif match["newline"] and equation is not None and equation[0] == "align":
            close_row()
        elif match["nonumber"] and equation is not None:
            equation = (equation[0], equation[1], False)
    return labels, given


#: The committed table: label (empty for a number without one), kind, number.
NUMBERS_FILE = "paper_numbers.csv"


@cache
def _table() -> list[dict]:
    with resources.files("paperlib.paper").joinpath(NUMBERS_FILE).open("r", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def numbers() -> dict[str, tuple[str, str]]:
    """The committed label -> (kind, number) table (:data:`NUMBERS_FILE`)."""
    return {row["label"]: (row["kind"], row["number"]) for row in _table() if row["label"]}


def given() -> set[tuple[str, str]]:
    """Every (kind, number) the paper gives, labelled or not: ``("appendix", "J.2")``, ``("equation", "10")``."""
    return {(row["kind"], row["number"]) for row in _table()}


def ref(label: str) -> str:
    """How the book names a label of the paper: ``Table 1``, ``Figure 4``, ``Eq. 9``, ``Appendix E``, ``§5.5``."""
    if label not in numbers():
        raise ValueError(f"the paper has no label {label!r}")
    kind, number = numbers()[label]
    return KINDS[kind] + number


#: A LaTeX label in prose, with the word before it that :func:`ref` also writes (``eq. `eq:x```).
_LABEL_IN_PROSE = re.compile(r"(?:§|(?:[Ee]q|[Ff]ig|App)\.\s*|(?:Table|Figure|Appendix|Eq)\s+)?"
                             r"`((?:tab|fig|eq|app|sec):[\w:]+)`")


def cite_by_number(text: str) -> str:
    """``text`` with every LaTeX label in backticks written as :func:`ref` names it.

    ``(eq. `eq:validation_gates`)`` becomes ``(Eq. 9)`` and ``§`sec:experiments:mnist``` becomes
    ``§5.2``: the word before a label is replaced along with it, so nothing is named twice.
    """
    return _LABEL_IN_PROSE.sub(lambda match: ref(match.group(1)), text)


def write_numbers(tex_path: str | Path, out: str | Path | None = None) -> Path:
    """Number the labels of the LaTeX at ``tex_path`` and write them as :data:`NUMBERS_FILE`."""
    out = Path(out or Path(__file__).with_name(NUMBERS_FILE))
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["label", "kind", "number"])
        writer.writerows(rows(Path(tex_path).read_text(encoding="utf-8")))
    return out


def rows(tex: str) -> list[list[str]]:
    """The rows of :data:`NUMBERS_FILE` for a LaTeX source: each label with its number, then each number
    that has no label."""
    labels, numbered = number_labels(tex)
    labelled = set(labels.values())
    return ([[label, kind, number] for label, (kind, number) in labels.items()]
            + [["", kind, number] for kind, number in dict.fromkeys(numbered) if (kind, number) not in labelled])


if __name__ == "__main__":
    print(write_numbers(sys.argv[1]))


_NUMBER = r"(?:[A-Z](?:\.\d+)*|\d+(?:\.\d+)*)(?![\w%])"
_LIST = rf"({_NUMBER}(?:(?:\s*[-–,]\s*|\s+and\s+|\s+or\s+){_NUMBER})*)"
_REFERENCE = re.compile(
    rf"(?P<kind>\bTables?|\bFigs?\.|\bFigures?|\b[Ee]qs?\.|\b[Ee]quations?|\bApp\.|\bAppendix|\bAppendices|§)"
    rf"\s?\(?{_LIST}")
_KIND_OF_WORD = {"tab": "table", "fig": "figure", "equ": "equation", "eq.": "equation", "eqs": "equation",
                 "app": "appendix", "§": "section"}


def references(text: str) -> list[tuple[str, str, str]]:
    """The paper's numbers a text names: (kind, number, the words as written), one per number, so that
    ``Tables 7-9`` gives tables 7 and 9 and ``eqs. 7 and 8`` equations 7 and 8. A section named by ``§``
    is a section of the body or, by its letter, an appendix."""
    found = []
    for match in _REFERENCE.finditer(text):
        word = match["kind"]
        kind = _KIND_OF_WORD[word[:3].lower()] if word != "§" else "section"
        for number in re.split(r"\s*[-–,]\s*|\s+and\s+|\s+or\s+", match[2]):
            number = number.rstrip(".")
            if not number:
                continue
            if kind == "section" and number[0].isalpha():
                kind = "appendix"
            found.append((kind, number, match[0].strip()))
    return found


def unknown_references(text: str) -> list[str]:
    """The references of ``text`` (:func:`references`) to numbers the paper does not give."""
    known = given()
    return [f"{words} ({kind} {number})" for kind, number, words in references(text) if (kind, number) not in known]
