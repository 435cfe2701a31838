"""Ratios taken pair by pair: what the benchmarks quote of two things timed in fresh processes.

A fresh process's time on a shared machine varies by +-10% from one process to the next, more than
most differences measured here: the medians of a few separate runs of each side can say 1.11x to
1.29x where the same two run in turn say 1.02x. So each repeat runs every side once, in turn (the
order reversed every other repeat), and the quotient is taken within each repeat: side A's i-th
time over side B's i-th. Quoted: the median of those quotients, their spread (min to max, and the
interquartile range from 4 pairs on) and the number of pairs. Standard library only.
"""

from __future__ import annotations

import statistics
from typing import Sequence


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Each pair's quotient, for times taken in the same repeats (the i-th of each side together)."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} against {len(denominators)} runs: not pairs")
    return [a / b for a, b in zip(numerators, denominators)]


def differences(minuends: Sequence[float], subtrahends: Sequence[float]) -> list[float]:
    """Each pair's difference, as ``ratios``."""
    if len(minuends) != len(subtrahends):
        raise ValueError(f"{len(minuends)} against {len(subtrahends)} runs: not pairs")
    return [a - b for a, b in zip(minuends, subtrahends)]


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """``{"pairs", "median", "min", "max", "q1", "q3"}`` (the quartiles None under 4 pairs)."""
    ordered = sorted(values)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 4 else [None, None, None]
    return {"pairs": len(ordered), "median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1],
            "q1": quartiles[0], "q3": quartiles[2]}


def describe(values: Sequence[float], unit: str = "x", scale: float = 1.0, digits: int = 2) -> str:
    """``1.02x (12 pairs; spread 0.93x to 1.23x, interquartile 0.98x to 1.08x)``."""
    s = summary(values)

    def show(v: float | int | None) -> str:
        return f"{float(v or 0) * scale:+.{digits}f}{unit}" if unit != "x" else f"{float(v or 0) * scale:.{digits}f}x"

    text = f"{show(s['median'])} ({s['pairs']} pair{'s' if s['pairs'] != 1 else ''}; spread {show(s['min'])} to {show(s['max'])}"
    if s["q1"] is not None:
        text += f", interquartile {show(s['q1'])} to {show(s['q3'])}"
    return text + ")"
