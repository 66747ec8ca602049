"""The ``lore`` command line.

    lore train --config config/lore/doorkey.yaml --run-dir results/runs/x --ablation full --seed 1 --set train.steps=20000
    lore config --ablation full --set model.preset=s          # print the resolved config
    lore list                                                 # ablations and presets
    lore eval --run-dir results/runs/x --episodes 20 --with-prior   # evaluate a run's checkpoint
    lore status [results] [--config config/paper.yaml]        # every run: state, step, steps/s, eval SR, ETA
    lore experiments check|plan|try|compare|recheck|note|log  # declared experiments
    lore aggregate|figures|paper-macros ...                   # analysis (see lore.report.cli, lore.paper.cli)

Every error is one line on stderr naming the problem, with exit status 2 (bad input) or
1 (runtime failure); a preempted run exits 143 after writing its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import yaml

from lore.utils.command_line import OneLineParser, bounded_int, fail, one_line

ANALYSIS_COMMANDS = ("aggregate", "figures", "paper-macros")
MAX_SAMPLE = 100_000
"""Most archived runs ``lore reproduce`` re-runs at once."""


class RedactingFilter(logging.Filter):
    """Masks keys and URL secrets (:func:`~lore.llm.secrets.redact_text`) in every record it passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        from lore.llm.secrets import redact_text

        record.msg, record.args = redact_text(record.getMessage()), None
        return True


class CurrentStderrHandler(logging.StreamHandler):
    """A stream handler writing to whatever ``sys.stderr`` is at each record (e.g. the tee of a run's train.log)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def log_to_stderr() -> None:
    """Warnings and errors of every logger to stderr, one line each, redacted (what Python would print without a
    handler, masked); nothing when the root logger has handlers already."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = CurrentStderrHandler()
    handler.setLevel(logging.WARNING)
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", help="run-config YAML (fields of lore.config.RunConfig)")
    p.add_argument("--ablation", "-a", help="ablation name (see `lore list`)")
    p.add_argument("--seed", type=int, help="shorthand for --set seed=N")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="shorthand for --set device=...")
    p.add_argument("--set", "-s", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override, e.g. --set train.steps=20000 --set model.preset=xs (repeatable)")


def _config_from_args(args):
    from lore.config import ConfigError, load_config

    if args.config is not None and not args.config.strip():
        raise ConfigError("--config: empty file name")
    overrides = list(args.set)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if args.device is not None:
        overrides.append(f"device={args.device}")
    return load_config(args.config, overrides, args.ablation)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="lore", description="LoRe: DreamerV3 with a gated LLM action prior")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train, resume, or no-op when the run is complete")
    _add_config_args(t)
    t.add_argument("--run-dir", "-o", required=True, help="run directory (created; resumed if it has a checkpoint)")
    t.add_argument("--no-progress", action="store_true", help="disable the progress bar")
    t.add_argument("--finished-line", metavar="PATH",
                   help="also append one line (env, arm, seed, final eval SR, wall time) to PATH when the run is "
                        "complete, e.g. /dev/fd/3 (the workflow's console)")
    t.add_argument("--archive", metavar="DIR", help="copy the finished run into the run archive DIR (e.g. runs); "
                   "a run DIR already holds is restored from it instead of trained")
    t.add_argument("--restore-only", action="store_true",
                   help="with --archive: restore a run the archive holds, but archive nothing (a trial)")
    c = sub.add_parser("config", help="print the fully resolved config as YAML")
    _add_config_args(c)
    sub.add_parser("list", help="list ablations and model presets")
    e = sub.add_parser("eval", help="evaluate a run's checkpoint on fresh episodes (writes eval.csv's columns)")
    e.add_argument("--run-dir", "-o", required=True, help="run directory (reads config.yaml and checkpoint.pt)")
    e.add_argument("--episodes", "-n", type=int, help="episodes, 1..10000 (default: the run's eval.episodes)")
    e.add_argument("--seed", type=int, help="evaluation seed in 0..2**32-1: layouts and sampling "
                                           "(default: the run's seed, "
                                           "which reproduces training's evaluation at the checkpoint)")
    e.add_argument("--with-prior", action="store_true",
                   help="mix in the LLM prior from the run's advisor backend (scripted works offline)")
    e.add_argument("--env", help="another env id with the same observation and action spaces")
    e.add_argument("--frames", metavar="DIR", help="save frames (PNG per step, a GIF per episode) under DIR")
    e.add_argument("--out", help="output CSV (default: RUN/eval_<tag>.csv; never the run's eval.csv)")
    e.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default: the run's device setting")
    st = sub.add_parser("status", help="progress of every run under a runs (or results) root: state, step, ETA")
    st.add_argument("root", nargs="?", help="runs root, or a results root holding runs/ (default: results/runs)")
    st.add_argument("--config", help="workflow config: also list its runs that have no directory yet")
    st.add_argument("--json", action="store_true", help="print JSON instead of the table")
    a = sub.add_parser("archive", help="copy finished runs into the run archive (tracked in git); --check checks it")
    a.add_argument("roots", nargs="*", default=["results"], help="folders holding finished runs (default: results)")
    a.add_argument("--to", default="runs", help="the archive (default: runs)")
    a.add_argument("--check", action="store_true", help="only check every archive entry and print its size")
    r = sub.add_parser("reproduce", help="re-run a sample of archived runs here and compare their eval.csv exactly")
    r.add_argument("--archive", default="runs", help="the archive (default: runs)")
    r.add_argument("--sample", type=bounded_int(1, MAX_SAMPLE), default=2,
                   help=f"how many runs, one per ablation first, 1..{MAX_SAMPLE} (default: 2)")
    r.add_argument("--seed", type=bounded_int(0, 2**32 - 1), default=0, help="seed of the random draw (default: 0)")
    r.add_argument("--match", help="only entries whose <env>/<key> contains this text")
    r.add_argument("--keep", metavar="DIR", help="keep the new runs under DIR (default: deleted)")
    sub.add_parser("experiments", help="declared experiments: check, plan, try, compare, recheck, note, log "
                   "(see `lore experiments --help`)", add_help=False)
    for name in ANALYSIS_COMMANDS:
        sub.add_parser(name, help=f"analysis command (see `lore {name} --help`)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "experiments":
        from lore.experiments.cli import main as experiments_main

        return experiments_main(argv[1:])
    if argv and argv[0] == "paper-macros":
        from lore.paper.cli import main as paper_main

        return paper_main(argv) or 0
    if argv and argv[0] in ANALYSIS_COMMANDS:
        from lore.report.cli import main as report_main

        return report_main(argv) or 0
    args = build_parser().parse_args(argv)
    log_to_stderr()
    from lore.config import ConfigError

    try:
        if args.command == "list":
            from lore.ablations import ABLATIONS
            from lore.presets import PRESETS

            print("ablations:")
            for name, ov in ABLATIONS.items():
                print(f"  {name:18s} {json.dumps(ov)}")
            print("presets:")
            for name, dims in PRESETS.items():
                print(f"  {name:6s} {json.dumps(dims)}")
            return 0
        if args.command == "eval":
            return _eval(args)
        if args.command in ("archive", "reproduce"):
            return _archive(args)
        if args.command == "status":
            from lore.grid.status import status_command

            try:
                return status_command(args.root, args.config, args.json)
            except BrokenPipeError:  # `lore status | head`: the reader has what it wanted
                import os

                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
                return 0
        if args.command == "train" and not args.run_dir.strip():
            raise ConfigError("--run-dir: empty directory name")
        cfg = _config_from_args(args)
        if args.command == "config":
            from lore.config.build import shown_config

            print(yaml.safe_dump(shown_config(cfg), sort_keys=False), end="")
            return 0
        from lore.train.run_log import RunLog

        with RunLog() as run_log:  # what `lore train` prints is also appended to <run-dir>/train.log
            return _train(cfg, args, run_log)
    except ConfigError as e:
        return fail(e)


def _train(cfg, args, run_log=None) -> int:
    from lore.config import ConfigError
    from lore.train.checkpoint import CheckpointError
    from lore.train.trainer import Preempted, train
    from lore.utils.io import NoSpaceError

    restored = _restore(cfg, args) if args.archive else None
    if isinstance(restored, int):
        return restored
    try:
        summary = restored or train(cfg, args.run_dir, show_progress=False if args.no_progress else None,
                                    run_log=run_log)
    except Preempted as e:
        print(f"lore: {e}", file=sys.stderr)
        return 143
    except (CheckpointError, ConfigError) as e:
        return fail(e)
    except NoSpaceError as e:  # the previous checkpoint is intact: a rerun resumes once there is room
        return fail(e, 1)
    except Exception as e:  # noqa: BLE001 - LLM start-up errors (missing key, bad ledger) get one clear line
        from lore.llm import LLMConfigError

        if isinstance(e, LLMConfigError):
            return fail(e)
        raise
    if args.finished_line:
        from lore.grid.status import write_finished_line

        write_finished_line(args.run_dir, args.finished_line)
    if args.archive and not args.restore_only and not summary.get("restored"):  # a restored run is its entry
        from lore.archive import ArchiveError, archive_run

        try:
            entry, _ = archive_run(args.run_dir, args.archive)
        except ArchiveError as e:
            return fail(e)
        print(f"lore: archived {args.run_dir} as {entry}", file=sys.stderr)
    if summary.get("restored"):
        print(f"lore: {args.run_dir}: restored from the archive ({summary['restored']}); nothing trained")
    elif summary.get("already_done"):
        print(f"lore: {args.run_dir} is already complete (env_step {summary.get('env_step')}); nothing to do")
    else:
        print(json.dumps(summary))
    return 0


def _restore(cfg, args) -> dict | int | None:
    """The run restored from the archive ``args.archive`` (a summary), an exit code, or None to train it."""
    from lore.archive import ArchiveError, restore_run
    from lore.config import to_dict

    try:
        entry = restore_run(to_dict(cfg), args.run_dir, args.archive)
    except ArchiveError as e:
        return fail(e)
    return None if entry is None else {"restored": str(entry)}


def _archive(args) -> int:
    from pathlib import Path

    from lore import archive as ar

    folder = args.archive if args.command == "reproduce" else args.to
    if not folder.strip():
        return fail(f"{'--archive' if args.command == 'reproduce' else '--to'}: empty folder name")
    try:
        if args.command == "reproduce":
            from lore.archive.reproduce import reproduce_sample
            from lore.llm import LLMConfigError
            from lore.train.checkpoint import CheckpointError
            from lore.train.trainer import Preempted

            try:
                results = reproduce_sample(Path(args.archive), args.sample, args.seed, args.match,
                                           Path(args.keep) if args.keep else None)
            except (CheckpointError, LLMConfigError) as e:
                return fail(e)
            except Preempted as e:
                print(f"lore: reproduce {e}", file=sys.stderr)
                return 143
            same = sum(r.identical for r in results)
            print(f"lore: {same} of {len(results)} archived runs reproduced exactly at this commit")
            return 0 if same == len(results) else 1
        if args.check:
            entries = ar.check_archive(Path(args.to))
            print(ar.size_line(Path(args.to), [e.path for e in entries], sum(bool(e.retired) for e in entries)))
            return 0
        ar.archive_target(Path(args.to))
        refused = 0
        counts = {True: 0, False: 0}
        for root in args.roots:
            if not Path(root).is_dir():
                return fail(f"{root}: no such folder of runs")
            for run_dir in ar.finished_run_dirs(Path(root)):
                try:
                    _, new = ar.archive_run(run_dir, Path(args.to))
                except ar.ArchiveTargetError:
                    raise  # the archive cannot take any run: one line, no more tries
                except ar.ArchiveError as e:
                    refused += 1
                    print(f"lore: error: {one_line(e)}; not archived", file=sys.stderr)
                    continue
                counts[new] += 1
        print(f"lore: {counts[True]} run(s) archived in {args.to}, {counts[False]} already there, {refused} refused")
        return 2 if refused else 0
    except ar.ArchiveError as e:
        return fail(e)
    except OSError as e:  # anything the archive's own checks did not name
        return fail(ar.os_error_text(e))
    except KeyboardInterrupt:  # a half-written entry was removed on the way out
        print(f"lore: {args.command} interrupted; nothing half-written is left in the archive", file=sys.stderr)
        return 130


def _eval(args) -> int:
    from lore.llm import LLMConfigError
    from lore.train.checkpoint import CheckpointError
    from lore.train.eval_cli import EvalOptions, format_row, run_eval
    from lore.utils.io import NoSpaceError

    opts = EvalOptions(run_dir=args.run_dir, episodes=args.episodes, seed=args.seed, with_prior=args.with_prior,
                       env=args.env, frames=args.frames, out=args.out, device=args.device)
    try:
        row = run_eval(opts)
    except (CheckpointError, LLMConfigError) as e:  # ConfigError is reported by main()
        return fail(e)
    except NoSpaceError as e:
        return fail(e, 1)
    except KeyboardInterrupt:
        print("lore: eval interrupted; no output written", file=sys.stderr)
        return 130
    print(format_row(row))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
