"""The steps route's touches of torch's internals: AOTInductor's loader and pytree, for an exported
step (``aoti``). What only a build calls is builder/steps/torch_export.py."""
