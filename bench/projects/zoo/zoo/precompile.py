"""The build's workload: each case whose library loads, one training step and one inference, as users run them."""

import os

from zoo import CASES
from zoo.bench import available, first_steps


def workload() -> None:
    chosen = os.environ.get("ZOO_CASES")
    for name in chosen.split(",") if chosen else CASES:
        if available(name):
            first_steps(name)
