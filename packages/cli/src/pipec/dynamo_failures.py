"""Functions Dynamo cannot trace, outside fullgraph: they run eagerly, with a warning.

Dynamo raises when it fails to trace a function, for reasons of its own: a fake-tensor
computation that eager does not make (an op without a shape function), an internal error.
pipec's backend is never reached, so its fallback for a graph it cannot compile does not apply,
and torch.compile would hand the user Dynamo's traceback. Under `pipec.compile` (unless
`fullgraph=True` or `eager_fallback=False`, as `pipec compile` and `explain` set) a model's
calls go through `DynamoFallback`:

1. The failing call runs eagerly (`torch.compiler.set_stance("force_eager")`). Where eager fails
   too, the inputs are wrong for the model itself: eager's error is the caller's, and nothing
   changes. Otherwise that result is returned, with one warning naming the function and
   Dynamo's reason.
2. Later calls run with Dynamo's `suppress_errors` on: Dynamo marks the code it cannot trace to
   run eagerly (as torch's own `suppress_errors` does, for every caller of that code), and the
   functions and modules it calls are traced and compiled on their own. Dynamo's report of each
   suppressed error (a traceback at WARNING level) is held back: pipec has named it.
3. Where such a partly compiled call fails, the model's code behaved differently in its compiled
   parts than eagerly (transformers' Nystromformer builds a [batch, 1, seq, seq] mask when it sees
   it is being compiled, which its eagerly run attention cannot add). That call and every later
   one run wholly eagerly, with a second warning naming the error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings

from pipec_ir import RecompileLimitError

from .errors import PipecFallbackWarning, find_error, find_pipec_error
from .exits import one_line


def dynamo_failure(exc: BaseException) -> bool:
    """Whether `exc` is Dynamo failing to trace (not pipec's backend, not the user's code)."""
    from torch._dynamo import exc as dynamo_exc

    if find_pipec_error(exc) is not None or find_error(exc, dynamo_exc.BackendCompilerFailed) is not None:
        return False
    return isinstance(exc, (dynamo_exc.TorchRuntimeError, dynamo_exc.InternalTorchDynamoError,
                            dynamo_exc.Unsupported))


class DynamoFallback:
    """One compiled model's state: `mode` is "compiled" (no failure yet), "partial" (the code
    Dynamo cannot trace runs eagerly, the rest compiled) or "eager" (module docstring)."""

    def __init__(self) -> None:
        self.mode = "compiled"

    def failed(self, fn, exc: BaseException, args, kwargs):
        """The call that failed in Dynamo with `exc`: eager's result (or its error)."""
        out = _eagerly(fn, args, kwargs, exc)
        warnings.warn(PipecFallbackWarning(
            f"pipec: Dynamo could not trace {_where(exc)}, so this call ran eagerly; from the next "
            f"call that code runs eagerly and what it calls is compiled ({_reason(exc)})"), stacklevel=3)
        self.mode = "partial"
        return out

    def call(self, fn, scope, args, kwargs):
        if self.mode == "eager":
            return _eagerly(fn, args, kwargs)
        try:
            with scope, _untraceable_code_runs_eagerly():
                return fn(*args, **kwargs)
        except RecompileLimitError:
            raise
        except Exception as exc:  # noqa: BLE001 - eager decides: its own error, or the result
            out = _eagerly(fn, args, kwargs, exc)
            warnings.warn(PipecFallbackWarning(
                "pipec: with the code Dynamo could not trace run eagerly, the model failed in its compiled "
                f"parts ({_reason(exc)}); it runs wholly eagerly from now on"), stacklevel=3)
            self.mode = "eager"
            return out


def _eagerly(fn, args, kwargs, failure: BaseException | None = None):
    """`fn(*args, **kwargs)` with Dynamo off for the whole call; where this torch cannot turn it
    off, `failure` (the error that led here) is raised again."""
    import torch

    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:
        if failure is not None:
            raise failure
        return fn(*args, **kwargs)
    with set_stance("force_eager"):
        return fn(*args, **kwargs)


def _where(exc: BaseException) -> str:
    """`forward (modeling_x.py:120)`: the function that runs eagerly (the outermost frame Dynamo
    was tracing), and the line where tracing failed when that is elsewhere."""
    stack = getattr(exc, "real_stack", None)
    if not stack:
        return "a function of the model"
    name = lambda frame: f"{os.path.basename(frame.filename)}:{frame.lineno}"  # noqa: E731
    top, failed = stack[0], stack[-1]
    inner = f", failing at {failed.name} ({name(failed)})" if len(stack) > 1 else ""
    return f"{top.name} ({name(top)}{inner})"


def _reason(exc: BaseException) -> str:
    """One line of the error, with Dynamo's explanation where it gives one (exits.one_line)."""
    return one_line(exc)[:400]


class _SuppressedReports(logging.Filter):
    """Drops Dynamo's report of an error it suppressed: pipec has warned about it already."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING or record.exc_info is None


@contextlib.contextmanager
def _untraceable_code_runs_eagerly():
    import torch

    logger, quiet = logging.getLogger("torch._dynamo.convert_frame"), _SuppressedReports()
    logger.addFilter(quiet)
    try:
        with torch._dynamo.config.patch(suppress_errors=True):
            yield
    finally:
        logger.removeFilter(quiet)
