"""The generated paper, built the way the workflow builds it: synthetic run directories ->
``aggregate`` -> ``write_generated`` (macros, sentences, tables) -> ``make_figures`` -> ``build_pdf``
(pdflatex) on ``paper/lore.tex``. Fails on overfull boxes over 10 pt, undefined references, citations
or statistics, figures LaTeX prints with text below 7 pt, and digits typed into prose: in
``paper/lore.tex`` every number is a macro, and in the generated sentences and captions every
number the generator computed is wrapped in ``\\lorenum{...}``, so a digit outside one was typed
into a template.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from lore.paper.build import write_generated
from lore.paper.macros import SENTENCE_MACROS
from lore.report.aggregate import AnalysisSettings, aggregate
from lore.report.runs import load_runs
from lore.report.synthetic import SyntheticRun, run_dir_for, write_run

REPO = Path(__file__).resolve().parents[1]
TEX = REPO / "paper" / "lore.tex"
DOORKEY, LAVAGAP = "MiniGrid-DoorKey-5x5-v0", "MiniGrid-LavaGapS5-v0"
# Two environments; arms with 5 seeds and with 3 (flagged), one advisor-quality arm.
GRID = {DOORKEY: {"rl_only": 5, "prior_only": 3, "kl": 3, "full": 5, "full_adversarial": 3},
        LAVAGAP: {"rl_only": 3, "full": 3}}
SETTINGS = AnalysisSettings(budgets=(1000, 2000), headline_budget=2000, window_center=1000,
                            window_half_width=250, resamples=200)
MAX_OVERFULL_PT = 10.0

needs_latex = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex not found: install TeX Live (apt-get install texlive-latex-base texlive-latex-recommended "
           "texlive-fonts-recommended latexmk) to build the paper")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Synthetic runs, their statistics and the generated LaTeX (no LaTeX needed)."""
    root = tmp_path_factory.mktemp("paper")
    paths = [write_run(run_dir_for(root / "runs", env, arm, seed),
                       SyntheticRun(env=env, ablation=arm, seed=seed, steps=2000, eval_every=500, log_every=200))
             for env, arms in GRID.items() for arm, seeds in arms.items() for seed in range(seeds)]
    runs = load_runs(paths)
    tables = aggregate(runs, SETTINGS)
    write_generated(tables, SETTINGS, root / "generated", [DOORKEY, LAVAGAP])
    return {"root": root, "runs": runs, "tables": tables, "generated": root / "generated"}


@pytest.fixture(scope="module")
def built(generated):
    """The PDF and its LaTeX log (skips without pdflatex)."""
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not found: install TeX Live to build the paper")
    from lore.paper.build import build_pdf
    from lore.report.figures import make_figures

    root = generated["root"]
    make_figures(generated["runs"], generated["tables"], SETTINGS, root / "figures")
    pdf = build_pdf(TEX, generated["generated"], root / "figures", root / "out" / "lore.pdf", root / "latex.log")
    log = (root / "out" / "build" / "lore.log").read_text(errors="replace")
    return {"pdf": pdf, "log": log}


# --------------------------------------------------------------------------- LaTeX log


@needs_latex
def test_paper_has_no_overfull_boxes(built):
    boxes = re.findall(r"^(Overfull \\[hv]box \((\d+(?:\.\d+)?)pt too \w+\).*)$", built["log"], re.M)
    bad = [line for line, size in boxes if float(size) > MAX_OVERFULL_PT]
    assert not bad, f"overfull boxes over {MAX_OVERFULL_PT} pt:\n" + "\n".join(bad)


@needs_latex
def test_paper_has_no_undefined_references_citations_or_statistics(built):
    log = built["log"]
    problems = re.findall(r"^.*(?:Reference `[^']*' on page \d+ undefined|Citation `[^']*' on page \d+ undefined"
                          r"|There were undefined references|Undefined control sequence"
                          r"|Package lore Warning).*$", log, re.M)
    assert not problems, "\n".join(problems)


@needs_latex
def test_figures_print_text_of_at_least_seven_points(built):
    from lore.report.figures import MIN_FONT_PT, SMALLEST_FONT_PT

    included = re.findall(r"<(figures//[\w.]+\.pdf), id=\d+, ([\d.]+)pt x [\d.]+pt>\s*\n"
                          r"(?:.*\n){0,3}?\(pdftex\.def\)\s+Requested size: ([\d.]+)pt", built["log"])
    assert included, "no figure inclusions found in the LaTeX log"
    small = [(name, float(req) / float(native)) for name, native, req in included
             if float(req) / float(native) * SMALLEST_FONT_PT < MIN_FONT_PT - 1e-6]
    assert not small, f"figures scaled so their text prints below {MIN_FONT_PT} pt: {small}"


# --------------------------------------------------------------------------- typed digits


def _balanced(text: str, start: int) -> int:
    """Index just past the brace group opening at ``text[start] == '{'``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif text[i] == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return i + 1
    raise AssertionError(f"unbalanced braces after {text[start:start + 80]!r}")


def _drop_command_args(text: str, commands: tuple[str, ...]) -> str:
    """Remove ``\\cmd[opt]{arg}`` (first brace group, balanced) for each command in ``commands``."""
    pattern = re.compile(r"\\(?:" + "|".join(commands) + r")\*?(?:\[[^\]]*\])?(?=\{)")
    while (m := pattern.search(text)) is not None:
        text = text[:m.start()] + " " + text[_balanced(text, m.end()):]
    return text


MATH = re.compile(r"\$[^$]*\$|\\\[.*?\\\]|\\begin\{(equation|align)\*?\}.*?\\end\{\1\*?\}", re.S)
TYPED_DIGIT = re.compile(r"(?<![A-Za-z0-9@])\d")  # DreamerV3 and other names with a digit are words


def typed_digits(prose: str) -> list[str]:
    """Digits in prose that no macro produced: outside math, \\lorenum{}, names, references, options."""
    text = re.sub(r"(?<!\\)%.*", "", prose)  # comments
    text = re.sub(r"\\begin\{verbatim\}.*?\\end\{verbatim\}", " ", text, flags=re.S)
    text = re.sub(r"\\verb(.).*?\1", " ", text)
    text = MATH.sub(" ", text)
    text = _drop_command_args(text, ("lorenum", "texttt", "ref", "label", "cite", "citep", "citet", "input",
                                     "includegraphics", "bibliography", "bibliographystyle", "lorestat",
                                     "begin", "end", "graphicspath", "setcounter", "multicolumn"))
    text = re.sub(r"\[[^\]]*\](?=\s*\{?)", " ", text)  # remaining optional arguments ([tbp], [-1pt])
    text = re.sub(r"\d+(?:\.\d+)?\\(?:linewidth|textheight|textwidth)", " ", text)
    return [text[max(0, m.start() - 40): m.end() + 40].replace("\n", " ") for m in TYPED_DIGIT.finditer(text)]


def macro_bodies(tex: str, names) -> dict[str, str]:
    out = {}
    for name in names:
        m = re.search(r"\\newcommand\{\\" + name + r"\}\{", tex)
        assert m, f"macros.tex defines no \\{name}"
        out[name] = tex[m.end() - 1:_balanced(tex, m.end() - 1)]
    return out


def captions(tex: str) -> list[str]:
    out = []
    for m in re.finditer(r"\\caption\{", tex):
        out.append(tex[m.end() - 1:_balanced(tex, m.end() - 1)])
    return out


def test_digit_check_catches_typed_numbers_and_passes_macros():
    assert typed_digits(r"after \lorenum{10k} steps the IQM is \lorenum{0.98 [0.75, 1.00]}") == []
    assert typed_digits(r"DreamerV3 with $\min(1, 2\tau)$ and \texttt{seed0}, Figure~\ref{fig:2}") == []
    assert typed_digits(r"the 22 achievements") and typed_digits(r"fewer than 5 seeds")


def test_generated_sentences_and_captions_have_no_typed_digits(generated):
    macros = (generated["generated"] / "macros.tex").read_text()
    bodies = macro_bodies(macros, SENTENCE_MACROS + ("loreFindingsTable", "loreGapTable"))
    texts = {f"\\{name}": body for name, body in bodies.items() if name in SENTENCE_MACROS}
    for name in ("loreFindingsTable", "loreGapTable"):
        texts.update({f"caption in \\{name}": c for c in captions(bodies[name])})
    for path in sorted(generated["generated"].glob("*_table.tex")):
        texts.update({f"caption in {path.name}": c for c in captions(path.read_text())})
    bad = {where: found for where, text in texts.items() if (found := typed_digits(text))}
    assert not bad, f"digits typed into generated prose (wrap computed numbers in \\lorenum): {bad}"
    assert texts["\\loreFindings"].count(r"\lorenum{") > 10, "the findings quote no numbers"


def test_paper_source_prose_has_no_typed_digits():
    tex = TEX.read_text()
    body = tex[tex.index(r"\begin{document}"):tex.index(r"\end{document}")]
    found = typed_digits(body)
    assert not found, "numbers typed into paper/lore.tex (use a generated macro):\n" + "\n".join(found)


def test_generated_text_names_only_arms_that_ran(generated):
    macros = (generated["generated"] / "macros.tex").read_text()
    bodies = macro_bodies(macros, ("loreAbstractGrid", "loreArms", "loreAdvisorSentence", "loreGoals"))
    ran = {arm for arms in GRID.values() for arm in arms}
    for name, body in bodies.items():
        named = set(re.findall(r"\\texttt\{([a-z\\_]+)\}", body))
        named = {n.replace("\\_", "_") for n in named} - {"scripted"}
        assert named <= ran, f"\\{name} names arms that did not run: {named - ran}"
    assert "noisy" not in bodies["loreAbstractGrid"] and "adversarial" in bodies["loreAbstractGrid"]
    assert "none" not in bodies["loreAdvisorSentence"]
    assert "Rl alone" not in bodies["loreGoals"] and "RL alone" in bodies["loreGoals"]


@needs_latex
def test_a_grid_without_crafter_has_no_crafter_section_table_or_figure(generated, built):
    assert r"\lorecrafterfalse" in (generated["generated"] / "macros.tex").read_text()
    assert (generated["generated"] / "crafter_table.tex").read_text().startswith("%")  # a comment, no table
    assert "fig1_success.pdf" in built["log"]  # included figures are named in the log ...
    assert "crafter_achievements.pdf" not in built["log"] and "crafter_table" not in built["log"]  # ... this one not
