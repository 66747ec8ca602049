"""The paper's generated parts and its PDF build.

``write_generated(tables, settings, out_dir)`` writes ``macros.tex`` (every statistic as a
macro, the result sentences and the findings / train-vs-eval tables; assembled in
:mod:`lore.paper.macros`) and the LaTeX tables; ``paper/lore.tex`` only ever refers to
these, so no result number is typed into the text.
``build_pdf`` compiles the paper with latexmk (or pdflatex + bibtex) in a scratch directory and
copies the PDF out.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from lore.paper.macros import macros_tex
from lore.report.aggregate import AnalysisSettings, Tables
from lore.report.latex import TABLE_FILES, latex_texts
from lore.report.outputs import copy_file, write_text

LATEX_INSTALL_HINT = (
    "install TeX Live, e.g. on Debian/Ubuntu: apt-get install texlive-latex-base texlive-latex-recommended "
    "texlive-fonts-recommended latexmk (or run .ci/install-system.sh as root)"
)


class PaperBuildError(RuntimeError):
    """The PDF could not be built; the message says why and what to install."""


def write_generated(tables: Tables, settings: AnalysisSettings, out_dir: str | Path,
                    envs_order: Sequence[str] | None = None, decision_root: str | Path | None = None) -> list[Path]:
    """``macros.tex`` and the LaTeX tables, all rendered before the first is written (atomically);
    ``decision_root``: see :func:`lore.paper.macros.macros_tex`."""
    out_dir = Path(out_dir)
    root = None if decision_root is None else Path(decision_root)
    texts = {"macros.tex": macros_tex(tables, settings, envs_order, root), **latex_texts(tables, settings)}
    return [write_text(out_dir / name, text) for name, text in texts.items()]


GENERATED_FILES = ("macros.tex", *TABLE_FILES)
"""The files :func:`write_generated` writes."""


# --------------------------------------------------------------------------- build


def latex_tools() -> dict[str, str | None]:
    return {name: shutil.which(name) for name in ("latexmk", "pdflatex", "bibtex")}


def _missing_package_hint(log_text: str) -> str:
    match = re.search(r"File `([^']+)' not found", log_text)
    if not match:
        return ""
    return (f" LaTeX file {match.group(1)} is missing: {LATEX_INSTALL_HINT}; find the Debian package that "
            f"ships it with `apt-file search {match.group(1)}`.")


def build_pdf(tex: str | Path, generated_dir: str | Path, figures_dir: str | Path, out_pdf: str | Path,
              log: str | Path | None = None) -> Path:
    """Compile ``tex`` with its ``generated/`` and ``figures/`` next to it; returns ``out_pdf``."""
    tex, generated_dir, figures_dir, out_pdf = map(Path, (tex, generated_dir, figures_dir, out_pdf))
    tools = latex_tools()
    if not tools["pdflatex"]:
        raise PaperBuildError(f"pdflatex not found: {LATEX_INSTALL_HINT}")
    for path, what in ((tex, "paper source"), (generated_dir / "macros.tex", "generated macros"),
                       (figures_dir, "figures directory")):
        if not path.exists():
            raise PaperBuildError(f"{path}: missing {what}")
    build = out_pdf.parent / "build"
    if build.exists():
        shutil.rmtree(build)
    build.mkdir(parents=True)
    shutil.copy2(tex, build / tex.name)
    for bib in tex.parent.glob("*.bib"):
        shutil.copy2(bib, build / bib.name)
    shutil.copytree(generated_dir, build / "generated")
    shutil.copytree(figures_dir, build / "figures")
    if tools["latexmk"]:
        commands = [["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error",
                     tex.name]]
    else:
        run = ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error", tex.name]
        commands = [run] + ([["bibtex", tex.stem]] if tools["bibtex"] and list(build.glob("*.bib")) else []) + [run, run]
    output = []
    for command in commands:
        proc = subprocess.run(command, cwd=build, capture_output=True, text=True)
        output.append(f"$ {' '.join(command)}\n{proc.stdout}\n{proc.stderr}")
        if proc.returncode != 0:
            text = "\n".join(output)
            if log:
                write_text(log, text)
            tex_log = build / f"{tex.stem}.log"
            log_text = tex_log.read_text(errors="replace") if tex_log.exists() else text
            errors = [line for line in log_text.splitlines() if line.startswith("!") or ":error" in line.lower()
                      or re.match(r"^.*\.tex:\d+:", line)]
            raise PaperBuildError(
                f"{command[0]} failed (exit {proc.returncode}) building {tex}: "
                + ("; ".join(errors[:3]) or "see the log") + _missing_package_hint(log_text)
                + (f" (full log: {log})" if log else ""))
    if log:
        write_text(log, "\n".join(output))
    produced = build / f"{tex.stem}.pdf"
    if not produced.is_file():
        raise PaperBuildError(f"{command[0]} reported success but wrote no {produced}")
    return copy_file(produced, out_pdf)
