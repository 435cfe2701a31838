"""``python -m hatch_precompile ...``: the ``hatch-precompile`` command."""

import sys

from hatch_precompile.cli import main

sys.exit(main())
