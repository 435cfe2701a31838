"""The build's workload: one generate on a (1, 8) prompt, and one unpacking, as the package's first calls make them."""

from deps_pkg import llm, weights


def workload() -> None:
    llm.generate(llm.make_model(), llm.prompt())
    weights.dense(weights.packed())
