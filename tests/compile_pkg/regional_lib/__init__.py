"""A library's regional compilation, as diffusers' ``ModelMixin.compile_repeated_blocks`` makes it:
each submodule of the named classes compiled with ``Module.compile()``. Another top-level package
than compile_pkg, as a library is, shipped in the same wheel for the test."""


def compile_repeated_blocks(model, names, **options):
    for submodule in model.modules():
        if type(submodule).__name__ in names:
            submodule.compile(**options)
    return model
