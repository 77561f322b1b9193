"""The recompile budget of one compiled model, and size buckets.

`RecompileBudget` is shared by everything that may compile or record again after a
model's first compilation: the torch.compile backend (a Dynamo recompile: a guard
failed, e.g. a size changed) and the CUDA Graph runtime (recording a graph for a
new size bucket). It travels to the runtime in the model's `LoadContext` (`budget`),
never in the cache-keyed options. Each of those events calls
`charge`; past the limit the caller runs eagerly (one warning per model) or,
when the budget is strict (fullgraph=True), `RecompileLimitError` is raised.

`bucket_of` is the bucketing policy: autotuned configs and CUDA Graphs are chosen
per bucket of the size-symbol values, so a new size inside a known bucket costs
no recompile and no re-tune.
"""

from __future__ import annotations

import logging
import threading
import warnings

DEFAULT_RECOMPILE_LIMIT = 8

# each charge, at INFO (PIPEC_LOGS=recompiles turns it on: pipec/logs.py)
recompiles_log = logging.getLogger("pipec.recompiles")
BUCKET_POLICIES = ("pow2", "exact")


class RecompileLimitError(RuntimeError):
    """A strict (fullgraph=True) model needed more recompiles than its budget allows."""


class RecompileLimitWarning(UserWarning):
    """A model used up its recompile budget: what would be recompiled runs eagerly."""


class RecompileBudget:
    """How many recompiles and CUDA Graph re-records one compiled model may still make."""

    def __init__(self, limit: int = DEFAULT_RECOMPILE_LIMIT, *, strict: bool = False, name: str = "model"):
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise ValueError(f"recompile_limit must be a non-negative integer, got {limit!r}")
        self.limit = limit
        self.strict = strict
        self.name = name
        self.spent = 0
        self.events: list[str] = []  # what each charge was for, in order
        self.exhausted = False
        self._lock = threading.Lock()

    def charge(self, what: str) -> bool:
        """Spend one unit on `what`. True: go ahead. False: run eagerly instead (warned once).
        Raises RecompileLimitError instead of returning False when the budget is strict."""
        with self._lock:
            first_refusal = False
            if not self.exhausted:
                self.spent += 1
                self.events.append(what)
                if self.spent <= self.limit:
                    recompiles_log.info("model %s: %s (recompile budget: %d of %d spent)", self.name, what,
                                        self.spent, self.limit)
                    return True
                self.exhausted = True
                first_refusal = True
        recompiles_log.info("model %s: %s: recompile budget (%d) used up, runs eagerly", self.name, what, self.limit)
        message = (f"pipec: model {self.name} used up its recompile budget (recompile_limit={self.limit}, "
                   f"shared by recompiles and CUDA Graph re-records) at: {what}")
        if self.strict:
            raise RecompileLimitError(
                f"{message}. fullgraph=True forbids falling back to eager: raise recompile_limit, "
                "compile with dynamic=True, or keep input sizes within fewer buckets")
        if first_refusal:
            warnings.warn(f"{message}; from now on what would be recompiled runs eagerly "
                          "(raise recompile_limit to allow more)", RecompileLimitWarning, stacklevel=3)
        return False

    @property
    def remaining(self) -> int:
        return max(self.limit - self.spent, 0)

    def __repr__(self) -> str:  # stable: CompileOptions.key() reprs option values
        return f"RecompileBudget(limit={self.limit}, strict={self.strict})"


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def bucket_of(value: int, policy: str = "pow2", upper: int | None = None) -> int:
    """The bucket of one size-symbol value: the largest size its bucket holds.

    "pow2": the next power of two (0 and 1 are their own buckets), capped at the
    symbol's upper bound; "exact": the value itself.
    """
    if policy == "exact" or value <= 1:
        return value
    if policy != "pow2":
        raise ValueError(f"unknown bucket policy {policy!r} (expected one of: {', '.join(BUCKET_POLICIES)})")
    b = next_pow2(value)
    return min(b, upper) if upper is not None and upper >= value else b
