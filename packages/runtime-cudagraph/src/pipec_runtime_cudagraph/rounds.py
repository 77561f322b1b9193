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

Most candidates lose by far more than any drift: a launch's configs differ by 1.5-3x. After
one round each way (where a linear drift already cancels) a candidate more than `PRUNE`
times slower than the best so far is not timed again, and a lone survivor is not timed alone.
ResNet-50's training step had timed 484 configs in 4 rounds (15 s of its 37 s first step); in
session 20's tuning run 45% of the configs timed were past 1.2x after two rounds, so a decision
costs about a fifth less timing. A dropped candidate would have to gain 20% over its two
samples to win. The max-autotune modes time every candidate in every round (`prune=None`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

ROUNDS = 4
# after PRUNE_AFTER rounds, a candidate whose mean is more than PRUNE x the best mean is dropped
PRUNE = 1.2
PRUNE_AFTER = 2


def time_in_rounds(calls: dict, bench: Callable, rounds: int = ROUNDS,
                   stop_on_error: bool = False, prune: float | None = PRUNE) -> tuple[dict, dict]:
    """({name: mean ms over the rounds}, {name: the exception it raised}) for `calls`
    ({name: zero-argument call}), timed by `bench(call) -> ms` once per round, the odd rounds in
    reverse order; a lone candidate is timed once. A candidate that raises gets `inf` and is
    not timed again; with `stop_on_error` the first error ends the timing (the others get
    whatever they have, `inf` if nothing). With `prune`, a candidate slower than `prune` x the
    best after PRUNE_AFTER rounds keeps the mean of the samples it has and is not timed again."""
    names = list(calls)
    rounds = max(1, rounds) if len(names) > 1 else 1  # one candidate: nothing to compare it with
    samples: dict[str, list[float]] = {name: [] for name in names}
    errors: dict[str, BaseException] = {}
    for r in range(rounds):
        if prune is not None and r == PRUNE_AFTER:
            names = _within(names, samples, errors, prune)
            if len(names) <= 1:  # a clear winner: more samples would not change the pick
                break
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
    names = list(calls)
    times = {name: math.inf if name in errors or not samples[name] else sum(samples[name]) / len(samples[name])
             for name in names}
    return times, errors


def _within(names: list, samples: dict, errors: dict, prune: float) -> list:
    """The names of `names` whose mean so far is within `prune` x the best mean (in order)."""
    means = {n: sum(samples[n]) / len(samples[n]) for n in names if n not in errors and samples[n]}
    if not means:
        return names
    best = min(means.values())
    return [n for n in names if n in means and means[n] <= prune * best]
