"""Sundial's command line: `python main.py COMMAND ...`; see `python main.py --help`.

The commands live in `cli/`; this file only hands over to them.
"""

import sys

from cli import main

if __name__ == "__main__":
    sys.exit(main())
