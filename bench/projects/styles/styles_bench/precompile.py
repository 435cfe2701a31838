"""The workload: each style once at the workload's size (8 rows), as the package's own warm-up;
the automatic-dynamic style at 8 and then 12 rows, so that torch compiles it again with dynamic rows."""

from styles_bench import cases


def workload() -> None:
    for name, case in cases.CASES.items():
        if cases.available(name):
            case(8)
    cases.automatic_dynamic(12)
