"""`python main.py backup`: a consistent copy of the embedded database, taken while
`serve` runs. The composition root picks the SQLite adapter (app.bootstrap); this
module reads the command line and prints what happened."""

from __future__ import annotations

import argparse
import sqlite3
import sys

from cli.common import Subparsers
from config.settings import Settings, variable

_EPILOG = """\
The copy is made with SQLite's online backup API: it is consistent (every committed
transaction, the ones still in the -wal file too) and safe while serve writes. It is
one self-contained file, readable by its owner only (it holds the task secret); an
existing OUT is replaced only once the copy is whole. Copying sundial.db with cp is
not a backup: the newest transactions live in sundial.db-wal.

To restore: stop serve, move the damaged sundial.db, sundial.db-wal and sundial.db-shm
aside, put the copy in place as sundial.db, start serve.

Exit status 0 when the copy is whole, 1 when it could not be made.

Environment:
  SUNDIAL_DB    the database to copy (--db, default .sundial/sundial.db)

Example:
  main.py backup --db /var/lib/sundial/sundial.db /backups/sundial-$(date +%F).db
"""


def add_backup(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "backup",
        help="copy the embedded database while it is in use",
        description="Copy the embedded SQLite database to OUT, consistently, while serve runs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", help="the database to copy (default: SUNDIAL_DB, else .sundial/sundial.db)")
    parser.add_argument("out", metavar="OUT", help="the file to write the copy to")
    parser.set_defaults(run=run_backup)


def run_backup(args: argparse.Namespace) -> int:
    from app.bootstrap import backup_database

    source = args.db or variable("SUNDIAL_DB") or Settings.db_path
    try:
        backup_database(source, args.out)
    except (OSError, sqlite3.Error) as error:
        print(f"backup: {source} could not be copied to {args.out}: {error}", file=sys.stderr)
        return 1
    print(f"backed up {source} to {args.out}")
    return 0
