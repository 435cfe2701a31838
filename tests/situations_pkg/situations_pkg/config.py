"""A package's config, set from the environment when it is imported, as many packages' are."""

import os

SCALE = float(os.environ.get("SITUATIONS_SCALE", "1.0"))
ACTIVATION = os.environ.get("SITUATIONS_ACTIVATION", "relu")  # the name of a torch.nn.functional function
