"""``lore paper-macros`` and ``paper-build``: the paper's generated parts and its PDF from the command line.

    lore paper-macros --tables results/tables --out paper/generated
    python -m lore.paper.cli paper-build --tex paper/lore.tex --generated paper/generated \
        --figures results/figures --out results/paper/lore.pdf

``lore.cli`` delegates ``paper-macros`` here (``main(argv)`` with argv starting at the subcommand). Errors,
inputs and outputs as in :mod:`lore.report.cli`, whose helpers these commands use.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from lore.report.cli import given_files, outputs_checked, run_command, settings_args, settings_from_args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lore", description="LoRe analysis: the paper")
    sub = parser.add_subparsers(dest="command", required=True)

    m = sub.add_parser("paper-macros", help="LaTeX macros and tables for paper/lore.tex")
    settings_args(m)
    m.add_argument("--tables", default="results/tables")
    m.add_argument("--out", default="paper/generated")
    m.add_argument("--envs", nargs="+", help="environments in the config's order (the first MiniGrid one is "
                                             "the paper's primary environment)")

    b = sub.add_parser("paper-build", help="compile the paper PDF (latexmk or pdflatex)")
    b.add_argument("--tex", default="paper/lore.tex")
    b.add_argument("--generated", default="paper/generated")
    b.add_argument("--figures", default="results/figures")
    b.add_argument("--out", default="results/paper/lore.pdf")
    b.add_argument("--log", help="write the LaTeX output here")
    return parser


def _paper_macros(args) -> None:
    from lore.paper.build import GENERATED_FILES, write_generated
    from lore.report.aggregate import Tables
    from lore.report.outputs import remove_stale_temporaries

    settings = settings_from_args(args)
    outputs = outputs_checked(args.out, [Path(args.out) / n for n in GENERATED_FILES],
                              Tables.paths(args.tables) + given_files(args))
    tables = Tables.read_csv(args.tables)
    remove_stale_temporaries(outputs)
    written = write_generated(tables, settings, args.out, args.envs)
    print(json.dumps({"files": [str(p) for p in written]}))


def _paper_build(args) -> None:
    from lore.paper.build import build_pdf
    from lore.report.outputs import check_apart, check_file

    outputs = [Path(args.out)] + ([Path(args.log)] if args.log else [])
    for path, flag in zip(outputs, ("--out", "--log"), strict=False):
        check_file(path, flag)
    inputs = [Path(args.tex), *Path(args.generated).glob("*"), *Path(args.figures).glob("*")]
    check_apart(outputs, inputs)
    build = Path(args.out).parent / "build"
    for source in (args.tex, args.generated, args.figures):
        if os.path.realpath(source) == os.path.realpath(build) or os.path.realpath(source).startswith(
                os.path.realpath(build) + os.sep):
            raise ValueError(f"{source}: lies in {build}, the folder paper-build empties; choose another --out")
    out = build_pdf(args.tex, args.generated, args.figures, args.out, args.log)
    print(json.dumps({"pdf": str(out)}))


COMMANDS = {"paper-macros": _paper_macros, "paper-build": _paper_build}


def main(argv: list[str] | None = None) -> int:
    from lore.paper.build import PaperBuildError
    from lore.report.outputs import OutputError

    return run_command(build_parser(), COMMANDS, argv, (PaperBuildError, OutputError))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
