"""A package that only calls torch.compile, each compiled function read in a situation of its own
(tests/integration/test_served_situations.py): what a served call must compute as a cold compile."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)
