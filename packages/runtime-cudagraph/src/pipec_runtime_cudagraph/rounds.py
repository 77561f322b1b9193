"""Timing candidates in rounds of alternating order, so that the GPU's clock drift does not pick
the winner.

A GPU under a sustained GEMM load slows as it heats. Timed once each, one after another, the
first candidate ran on a cooler GPU and won: the MLP's GEMM template picked its first config,
the pointer kernel, over the persistent TMA config that is faster in rotated rounds, and a
choice group's first alternative ("library") beat the template the same way
(docs/performance.md, "Candidates are timed in rotated rounds").

Here each candidate is timed once per round for a share of the time budget, the rounds run
forward and backward in turn, and a candidate's time is its mean over the rounds: under a drift
that is linear in time every candidate then sees the same average clock, and under one that
levels off (a GPU warming up) the first candidate's head start is one sample in four.
"""

from __future__ import annotations

import math
from collections.abc import Callable

ROUNDS = 4


def time_in_rounds(calls: dict, bench: Callable, rounds: int = ROUNDS,
                   stop_on_error: bool = False) -> tuple[dict, dict]:
    """({name: mean ms over the rounds}, {name: the exception it raised}) for `calls`
    ({name: zero-argument call}), timed by `bench(call) -> ms` once per round, the odd rounds in
    reverse order; a lone candidate is timed once. A candidate that raises gets `inf` and is
    not timed again; with `stop_on_error` the first error ends the timing (the others get
    whatever they have, `inf` if nothing)."""
    names = list(calls)
    rounds = max(1, rounds) if len(names) > 1 else 1  # one candidate: nothing to compare it with
    samples: dict[str, list[float]] = {name: [] for name in names}
    errors: dict[str, BaseException] = {}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            if name in errors:
                continue
            try:
                samples[name].append(bench(calls[name]))
            except Exception as e:  # noqa: BLE001 - a candidate that cannot run (resources) loses
                errors[name] = e
                if stop_on_error:
                    break
        if errors and stop_on_error:
            break
    times = {name: math.inf if name in errors or not samples[name] else sum(samples[name]) / len(samples[name])
             for name in names}
    return times, errors
