"""Each way users write ``torch.compile``, as torch's tutorials and diffusers' docs write it, in one
package: the compile styles of bench/styles.py. Each style is a function of ``styles_bench.cases``
that makes what it compiles and makes its first call."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)
