"""Functions Dynamo cannot trace, outside fullgraph: they run eagerly, with one warning.

Dynamo raises when it fails to trace a function, for reasons of its own: a fake-tensor
computation that eager does not make (transformers' Nystromformer at a sequence length other
than its config's), an internal error. pipec's backend is never reached, so its fallback for a
graph it cannot compile does not apply, and torch.compile would hand the user Dynamo's traceback.
Under `pipec.compile` (unless `fullgraph=True` or `eager_fallback=False`, as `pipec compile` and
`explain` set) the call is made again with Dynamo's `suppress_errors` on: Dynamo then marks that
function's code to run eagerly from now on, and the functions and modules it calls are still
traced and compiled on their own. pipec's warning names the function and Dynamo's reason;
Dynamo's own report of the suppressed error (a traceback at WARNING level) is held back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings

from .errors import PipecFallbackWarning, find_error, find_pipec_error


def dynamo_failure(exc: BaseException) -> bool:
    """Whether `exc` is Dynamo failing to trace (not pipec's backend, not the user's code)."""
    from torch._dynamo import exc as dynamo_exc

    if find_pipec_error(exc) is not None or find_error(exc, dynamo_exc.BackendCompilerFailed) is not None:
        return False
    return isinstance(exc, (dynamo_exc.TorchRuntimeError, dynamo_exc.InternalTorchDynamoError,
                            dynamo_exc.Unsupported))


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
    """The most specific line of Dynamo's message: its explanation, where it gives one."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    explained = [line for line in lines if line.startswith("Explanation:")]
    line = (explained or lines or [""])[0].removeprefix("Explanation: ")
    return f"{type(exc).__name__}: {line[:300]}"


def warn_dynamo_failure(exc: BaseException) -> None:
    warnings.warn(PipecFallbackWarning(
        f"pipec: Dynamo could not trace {_where(exc)} and it runs eagerly; the functions it calls are "
        f"compiled on their own ({_reason(exc)})"), stacklevel=3)


class _SuppressedReports(logging.Filter):
    """Drops Dynamo's report of an error it suppressed: pipec has warned about it already."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING or record.exc_info is None


@contextlib.contextmanager
def frames_dynamo_cannot_trace_run_eagerly():
    import torch

    logger, quiet = logging.getLogger("torch._dynamo.convert_frame"), _SuppressedReports()
    logger.addFilter(quiet)
    try:
        with torch._dynamo.config.patch(suppress_errors=True):
            yield
    finally:
        logger.removeFilter(quiet)
