"""The installed package's front door: the `sundial` command and the WSGI app.

The wheel keeps the product's packages (app, cli, config, engine, statemachine, web)
inside this directory instead of at the top of site-packages, where generic names like
`cli` or `config` would overwrite another distribution's files or be overwritten by
them. The product imports itself by those short names (as it does in a checkout, where
`python main.py` runs), so before importing any of them, the entry points here put this
directory first on sys.path, in this process only. Processes Sundial starts itself find
them too: the dispatcher children start in this directory and the config parse worker
inherits sys.path.
"""

from __future__ import annotations

import sys
from pathlib import Path

HOME = Path(__file__).resolve().parent


def use_product_packages() -> None:
    """Make the product's packages importable by their short names: this directory first
    on sys.path when the packages are in it (an installed wheel), else the checkout this
    directory is in, where they sit beside it (an editable install, `pip install -e .`)."""
    home = HOME if (HOME / "cli").is_dir() else HOME.parent
    if str(home) not in sys.path:
        sys.path.insert(0, str(home))


def main() -> int:
    """The `sundial` console script."""
    use_product_packages()
    from cli import main as run_command

    return run_command()
