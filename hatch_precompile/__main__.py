"""``python -m hatch_precompile``: the command line."""

import sys

from hatch_precompile.tools.cli import main

sys.exit(main())
