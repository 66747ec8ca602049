"""Declared experiments: load and check a declaration, plan its runs, compare them paired by seed, decide.

The command line of declared experiments (``config/experiments/<name>.yaml``), ``lore experiments ...``
(or ``python -m lore.experiments.cli ...``): declarations are loaded and checked in
:mod:`lore.experiments.declaration`, their runs planned in :mod:`lore.experiments.plan`,
compared and decided in :mod:`lore.experiments.compare`, re-checked from the archive in
:mod:`lore.experiments.recheck`, and the experiment log written in :mod:`lore.experiments.log`.
An experiment with a record (a verdict) is decided: ``plan``, ``compare`` and ``try`` refuse it in one line;
``check``, ``recheck``, ``note`` and ``log`` still read it.

    lore experiments check [NAME ...]       # validate declarations (exit 2 on the first error)
    lore experiments plan NAME              # the runs it needs, which exist, and the ETA
    lore experiments try NAME               # run it as a trial: nothing written under docs/ or runs/
    lore experiments compare NAME           # comparison + verdict -> results/experiments/NAME
    lore experiments recheck [NAME ...]     # recompute decided records from the archive (exit 1 on a difference)
    lore experiments note NAME TEXT         # what was done with its verdict
    lore experiments log                    # docs/experiments.md from declarations + records
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lore.experiments.compare import compare_experiment
from lore.experiments.declaration import REPO, ExperimentError, declared_names, load_declaration
from lore.experiments.log import LOG, RECORDS_DIR, log_markdown, read_record, record_path
from lore.experiments.plan import RESULTS_DIR, experiment_cost

MAX_CORES = 65_536
"""Most cores an ETA is computed for (beyond any one machine or allocation)."""


def main(argv: list[str] | None = None) -> int:
    from lore.utils.command_line import OneLineParser, bounded_int

    p = OneLineParser(prog="lore experiments", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="validate declarations (default: all)")
    c.add_argument("names", nargs="*")
    pl = sub.add_parser("plan", help="list an experiment's runs in launch order, their states and the ETA")
    pl.add_argument("name")
    pl.add_argument("--cores", type=bounded_int(1, MAX_CORES), default=os.cpu_count() or 1,
                    help=f"cores for the ETA, 1..{MAX_CORES} (default: this machine's)")
    cm = sub.add_parser("compare", help="compare an experiment's runs and apply its decision rule")
    cm.add_argument("name")
    cm.add_argument("--out", type=Path, help=f"output folder (default: {RESULTS_DIR}/<name>)")
    cm.add_argument("--record", action="store_true", help=f"also write {RECORDS_DIR}/<name>.json for the log")
    rc = sub.add_parser("recheck", help="recompute decided experiments' records from the archived runs they list")
    rc.add_argument("names", nargs="*", help="default: every record")
    tr = sub.add_parser("try", help="run an experiment as a trial: nothing written under docs/ or runs/")
    tr.add_argument("name")
    tr.add_argument("--cores", type=bounded_int(1, MAX_CORES), default=os.cpu_count() or 1,
                    help=f"cores, 1..{MAX_CORES} (default: this machine's)")
    tr.add_argument("--dry-run", "-n", action="store_true", help="print what would run, run nothing")
    nt = sub.add_parser("note", help="record what was done with a verdict (shown in the log)")
    nt.add_argument("name")
    nt.add_argument("text")
    lg = sub.add_parser("log", help=f"write {LOG}")
    lg.add_argument("--out", type=Path, default=LOG)
    args = p.parse_args(argv)
    try:
        if args.command == "check":
            from lore.experiments.plan import plan

            for name in args.names or declared_names():
                plan(load_declaration(name))  # the declaration, and its comparisons resolved
            print(f"{len(args.names or declared_names())} declaration(s) valid")
        elif args.command == "recheck":
            return _recheck(args.names or _recorded_names())
        elif args.command == "try":
            return _try(args.name, args.cores, args.dry_run)
        elif args.command == "plan":
            from lore.experiments.launch import cost_line

            states, summary = experiment_cost(args.name, cores=args.cores)
            for s in states:
                print(f"{s.run.env}\t{s.run.arm}\tseed{s.run.seed}\t{s.state}\t{s.folder}")
            print(cost_line(summary))
        elif args.command == "note":
            from lore.utils.io import atomic_write_text

            path = record_path(args.name)
            if not path.exists() and not path.is_symlink():
                raise ExperimentError(f"experiment {args.name!r}: no record {path} (run it first)")
            rec = read_record(path)
            log_markdown()  # every file the log is written from is read and checked before anything is written
            rec["note"] = " ".join(args.text.split())
            atomic_write_text(path, json.dumps(rec, indent=1) + "\n")
            atomic_write_text(LOG, log_markdown())
            print(f"noted {args.name}; wrote {LOG}")
        elif args.command == "compare":
            rec = compare_experiment(args.name, out=args.out, record_dir=RECORDS_DIR if args.record else None)
            print(f"{args.name}: {rec['verdict']} ({rec['reason']})")
        else:
            from lore.utils.io import atomic_write_text

            atomic_write_text(args.out, log_markdown())
            print(f"wrote {args.out}")
    except ExperimentError as e:
        print(f"lore: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


def _recorded_names() -> list[str]:
    return sorted(p.stem for p in RECORDS_DIR.glob("*.json"))


def _recheck(names: list[str]) -> int:
    """Print one line per record re-checked (and each difference); 1 when any record differs."""
    from lore.experiments.recheck import recheck

    differ = 0
    for name in names:
        result = recheck(name)
        print(result.line())
        for line in result.differences:
            print(f"  {line}")
        differ += not result.identical
    return 1 if differ else 0


def _try(name: str, cores: int, dry_run: bool) -> int:
    """Run experiment ``name`` through the workflow as a trial (``trial=True``): its runs under results/, its
    comparison in the trial folder, nothing under docs/ or runs/."""
    import shutil
    import subprocess

    from lore.experiments.log import check_open

    load_declaration(name)
    check_open(name)
    local = Path(sys.executable).parent / "snakemake"
    snakemake = str(local) if local.exists() else shutil.which("snakemake")
    if snakemake is None:
        raise ExperimentError("snakemake: not found (install lore with its workflow extra)")
    here = Path("Snakefile")
    snakefile = here if here.is_file() else REPO / "Snakefile"  # a project folder of its own uses lore's workflow
    cmd = [snakemake, "-s", str(snakefile), "--directory", ".", "--cores", str(cores), "--config",
           f"experiment={name}", "trial=True"]
    return subprocess.call(cmd + (["-n"] if dry_run else []))


if __name__ == "__main__":
    sys.exit(main())
