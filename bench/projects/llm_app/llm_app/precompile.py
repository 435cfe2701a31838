"""The build's workload: one generate on a (1, 8) prompt, as the application's first call makes it."""

from llm_app import model as M


def workload() -> None:
    M.generate(M.make_model(), M.prompt())
