"""`python -m sundial_scheduler COMMAND ...`: the same as the `sundial` command."""

import sys

from sundial_scheduler import main

sys.argv[0] = "sundial"  # the usage and error lines name the command, not this file
sys.exit(main())
