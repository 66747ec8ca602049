"""Declared experiments: load and check a declaration, plan its runs, compare them paired by seed, decide.

The command line of declared experiments (``config/experiments/<name>.yaml``): declarations are loaded
and checked in :mod:`lore.analysis.experiment_declaration`, their runs planned in
:mod:`lore.analysis.experiment_plan`, compared and decided in :mod:`lore.analysis.experiment_compare`, and
the experiment log written in :mod:`lore.analysis.experiment_log`. An experiment with a record (a verdict) is
decided: ``plan`` and ``compare`` refuse it in one line; ``check``, ``note`` and ``log`` still read it.

    python -m lore.analysis.experiments check [NAME ...]     # validate declarations (exit 2 on the first error)
    python -m lore.analysis.experiments plan NAME             # the runs it needs, and which exist
    python -m lore.analysis.experiments compare NAME          # comparison + verdict -> results/experiments/NAME
    python -m lore.analysis.experiments note NAME TEXT        # what was done with its verdict
    python -m lore.analysis.experiments log                   # docs/experiments.md from declarations + records
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lore.analysis.experiment_compare import compare_experiment
from lore.analysis.experiment_declaration import ExperimentError, declared_names, load_declaration
from lore.analysis.experiment_log import LOG, RECORDS_DIR, log_markdown, read_record, record_path
from lore.analysis.experiment_plan import RESULTS_DIR, experiment_cost

MAX_CORES = 65_536
"""Most cores an ETA is computed for (beyond any one machine or allocation)."""


def main(argv: list[str] | None = None) -> int:
    from lore.cli import _Parser, bounded_int

    p = _Parser(prog="python -m lore.analysis.experiments", description=__doc__.split("\n")[0])
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
    nt = sub.add_parser("note", help="record what was done with a verdict (shown in the log)")
    nt.add_argument("name")
    nt.add_argument("text")
    lg = sub.add_parser("log", help=f"write {LOG}")
    lg.add_argument("--out", type=Path, default=LOG)
    args = p.parse_args(argv)
    try:
        if args.command == "check":
            for name in args.names or declared_names():
                load_declaration(name)
            print(f"{len(args.names or declared_names())} declaration(s) valid")
        elif args.command == "plan":
            from lore.analysis.launch import cost_line

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


if __name__ == "__main__":
    sys.exit(main())
