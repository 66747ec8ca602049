"""``lore aggregate | figures`` and ``benchmark-report``: the statistics, tables and figures from the command line.

    lore aggregate --runs-root results/runs --out results/tables --budgets 10000 25000 50000
    lore figures --runs-root results/runs --tables results/tables --out results/figures
    python -m lore.report.cli benchmark-report --tables results/bench/tables \
        --figures results/bench/figures --out docs/benchmark --budgets 2500 5000 10000

``lore.cli`` delegates the first two here (``main(argv)`` with argv starting at the subcommand); the paper's
commands (``paper-macros``, ``paper-build``) are :mod:`lore.paper.cli`'s, which uses the helpers here. Every
error is one line on stderr with exit status 2 (bad input) or 1 (a file could not be written, e.g. a full disk;
the previous version of every output is kept). Each command reads and checks all its inputs, and checks its
output paths, before it writes its first file; every file is written atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lore.report.aggregate import AnalysisSettings


def settings_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("statistics (defaults: lore.report.aggregate.AnalysisSettings)")
    g.add_argument("--settings", help="YAML mapping of AnalysisSettings fields (e.g. the workflow's analysis: section)")
    g.add_argument("--budgets", type=int, nargs="+", help="env-step budgets at which SR is compared")
    g.add_argument("--env-budget", action="append", default=[], metavar="ENV=B1,B2",
                   help="per-environment budgets, e.g. crafter=100000,1000000 (repeatable)")
    g.add_argument("--headline-budget", type=int)
    g.add_argument("--threshold", type=float, help="SR threshold for 'steps to reach SR >= threshold'")
    g.add_argument("--window-center", type=float, help="centre of the original prototype's training-SR window")
    g.add_argument("--window-half-width", type=float)
    g.add_argument("--baseline", help="ablation that P(improvement) compares against")
    g.add_argument("--confidence", type=float)
    g.add_argument("--resamples", type=int, help="bootstrap resamples")
    g.add_argument("--bootstrap-seed", type=int)


def settings_from_args(args: argparse.Namespace) -> AnalysisSettings:
    data: dict = {}
    if args.settings:
        from lore.config import ConfigError, load_yaml

        try:  # the run config's YAML reader: tabs, binary files, deep nesting, duplicate keys reported
            data = load_yaml(args.settings)
        except ConfigError as e:
            raise ValueError(f"--settings: {e}") from None
    flags = {"budgets": args.budgets, "headline_budget": args.headline_budget, "threshold": args.threshold,
             "window_center": args.window_center, "window_half_width": args.window_half_width,
             "baseline": args.baseline, "confidence": args.confidence, "resamples": args.resamples,
             "seed": args.bootstrap_seed}
    data.update({k: v for k, v in flags.items() if v is not None})
    if args.env_budget:
        env_budgets = dict(data.get("env_budgets") or {})
        for text in args.env_budget:
            env, sep, values = text.partition("=")
            if not sep or not env or not values:
                raise ValueError(f"--env-budget {text!r}: expected ENV=B1,B2")
            try:
                env_budgets[env] = [int(v) for v in values.split(",")]
            except ValueError:
                raise ValueError(f"--env-budget {text!r}: budgets must be integers") from None
        data["env_budgets"] = env_budgets
    return AnalysisSettings.from_mapping(data)


def _runs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="*", help="run directories (default: every run under --runs-root)")
    p.add_argument("--runs-root", help="find every run directory (holding eval.csv) under this folder")
    p.add_argument("--run-list", help="file with one run directory per line")
    p.add_argument("--follow-links-outside", action="store_true",
                   help="follow symlinks under --runs-root that lead outside it (default: such a link is an error)")


def _read_run_list(path: str) -> list[Path]:
    path_ = Path(path)
    if not path_.is_file():
        raise ValueError(f"{path}: --run-list is not a file")
    try:
        text = path_.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: --run-list is not UTF-8 text") from None
    return [Path(line.strip()) for line in text.splitlines() if line.strip()]


def _run_dirs(args: argparse.Namespace) -> list[Path]:
    from lore.report.runs import find_run_dirs

    dirs = [Path(d) for d in args.run_dirs]
    if args.run_list:
        dirs += _read_run_list(args.run_list)
    if args.runs_root:
        dirs += find_run_dirs(args.runs_root, follow_outside=args.follow_links_outside)
    if not dirs:
        raise ValueError("no run directories: pass them, or --runs-root / --run-list")
    return list(dict.fromkeys(dirs))


def given_files(args: argparse.Namespace) -> list[Path]:
    """The settings file and run list named on the command line (inputs no output may replace)."""
    return [Path(p) for p in (getattr(args, "settings", None), getattr(args, "run_list", None)) if p]


def _run_files(dirs: list[Path]) -> list[Path]:
    from lore.report.runs import RUN_FILES

    return [*dirs, *(d / name for d in dirs for name in RUN_FILES)]


def outputs_checked(out: str, outputs: list[Path], inputs: list[Path]) -> list[Path]:
    """--out is a folder (or not there yet) and no output is an input; returns ``outputs``."""
    from lore.report.outputs import check_apart, check_folder

    check_folder(out, "--out")
    check_apart([Path(out), *outputs], inputs)
    return outputs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lore", description="LoRe analysis: statistics, tables, figures")
    sub = parser.add_subparsers(dest="command", required=True)

    a = sub.add_parser("aggregate", help="tidy tables + statistics (CSV and LaTeX) from run directories")
    _runs_args(a)
    settings_args(a)
    a.add_argument("--out", default="results/tables", help="output folder (default results/tables)")

    f = sub.add_parser("figures", help="figures (PNG + PDF) from run directories and the tables")
    _runs_args(f)
    settings_args(f)
    f.add_argument("--tables", default="results/tables", help="folder written by `lore aggregate`")
    f.add_argument("--out", default="results/figures")

    r = sub.add_parser("benchmark-report", help="the LLM-prior benchmark report (README.md, summary.csv, "
                                                "cited figures, CSV tables) from the tables and figures")
    settings_args(r)
    r.add_argument("--tables", default="results/tables", help="folder written by `lore aggregate`")
    r.add_argument("--figures", default="results/figures", help="folder written by `lore figures`")
    r.add_argument("--out", default="docs/benchmark")
    return parser


def _aggregate(args) -> None:
    from lore.report.aggregate import Tables, aggregate
    from lore.report.latex import TABLE_FILES, latex_texts
    from lore.report.outputs import remove_stale_temporaries, write_text
    from lore.report.runs import load_runs

    settings = settings_from_args(args)
    start = time.perf_counter()
    dirs = _run_dirs(args)
    out = Path(args.out)
    outputs = outputs_checked(args.out, Tables.paths(out) + [out / n for n in TABLE_FILES],
                              _run_files(dirs) + given_files(args))
    runs = load_runs(dirs)
    tables = aggregate(runs, settings)
    texts = latex_texts(tables, settings)
    remove_stale_temporaries(outputs)
    written = tables.write_csv(out) + [write_text(out / name, text) for name, text in texts.items()]
    incomplete = [str(r.path) for r in runs if not r.complete]
    if incomplete:
        print(f"lore aggregate: warning: {len(incomplete)} run(s) have no `done` marker (still running or "
              f"killed): {', '.join(incomplete[:5])}", file=sys.stderr)
    print(json.dumps({"runs": len(runs), "files": [str(p) for p in written],
                      "seconds": round(time.perf_counter() - start, 2)}))


def _figures(args) -> None:
    from lore.report.aggregate import Tables
    from lore.report.figures import figure_paths, make_figures
    from lore.report.outputs import remove_stale_temporaries
    from lore.report.runs import load_runs

    settings = settings_from_args(args)
    dirs = _run_dirs(args)
    outputs = outputs_checked(args.out, figure_paths(args.out),
                              _run_files(dirs) + Tables.paths(args.tables) + given_files(args))
    runs = load_runs(dirs)
    tables = Tables.read_csv(args.tables)
    remove_stale_temporaries(outputs)
    written = make_figures(runs, tables, settings, args.out)
    print(json.dumps({"runs": len(runs), "files": [str(p) for p in written]}))


def _benchmark_report(args) -> None:
    from lore.report.aggregate import Tables
    from lore.report.benchmark_report import report_paths, write_report

    settings = settings_from_args(args)
    paths = report_paths(args.tables, args.figures, args.out)
    sources = [p for p in paths.values() if p is not None]
    outputs_checked(args.out, list(paths), sources + Tables.paths(args.tables) + given_files(args))
    written = write_report(args.tables, args.figures, args.out, settings)
    print(json.dumps({"files": [str(p) for p in written]}))


COMMANDS = {"aggregate": _aggregate, "figures": _figures, "benchmark-report": _benchmark_report}


def main(argv: list[str] | None = None) -> int:
    from lore.report.outputs import OutputError

    return run_command(build_parser(), COMMANDS, argv, (OutputError,))


def run_command(parser: argparse.ArgumentParser, commands: dict, argv: list[str] | None,
                write_errors: tuple[type[Exception], ...]) -> int:
    """Run the command ``argv`` names: 0, or one line on stderr with exit status 1 (one of ``write_errors``: a
    file could not be written) or 2 (bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        commands[args.command](args)
    except write_errors as e:
        return fail(args.command, str(e), 1)
    except (ValueError, FileNotFoundError) as e:  # RunDataError is a ValueError
        return fail(args.command, str(e), 2)
    except OSError as e:  # an input that cannot be read (permissions, a device)
        return fail(args.command, f"{e.filename}: {e.strerror}" if e.filename else str(e), 2)
    return 0


def fail(command: str, message: str, status: int) -> int:
    """One line on stderr, whatever the message holds."""
    print(f"lore {command}: error: {' '.join(message.split())}", file=sys.stderr)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
