import hatch_precompile

precompile_status = hatch_precompile.load(__name__)
