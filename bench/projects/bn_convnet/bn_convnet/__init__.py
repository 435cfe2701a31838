"""A convnet with BatchNorm whose served inference ships exported; a server loads its checkpoint."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from bn_convnet.model import ConvNet, classify, classify_step, make_images, make_model  # noqa: E402

__all__ = ["ConvNet", "classify", "classify_step", "make_images", "make_model", "precompile_status"]
