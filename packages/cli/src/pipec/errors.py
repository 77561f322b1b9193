"""pipec's user-facing errors."""

from __future__ import annotations


class PipecError(RuntimeError):
    """A compilation failed: the message names the stage, its implementation and the graph."""

    def __init__(self, message: str, *, stage: str | None = None, impl: str | None = None,
                 graph: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.impl = impl
        self.graph = graph


class PipecConfigError(PipecError):
    """The user's configuration cannot work (an unwritable dump_dir, an unusable cache): an
    error wherever it happens, never a reason to run a graph eagerly."""


class PipecPluginWarning(UserWarning):
    """A plugin could not be loaded or registered and was skipped."""


class PipecFallbackWarning(UserWarning):
    """What pipec could not compile runs through torch: an op without a lowering (an extern call),
    or, outside fullgraph, a whole graph that failed to compile (eagerly)."""


def find_error(exc: BaseException | None, kind: type) -> BaseException | None:
    """The `kind` error inside `exc`, following Dynamo's wrapping (BackendCompilerFailed's
    inner_exception) and exception chaining."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, kind):
            return exc
        inner = getattr(exc, "inner_exception", None)
        exc = inner if isinstance(inner, BaseException) else (exc.__cause__ or exc.__context__)
    return None


def graph_break_error(exc: BaseException | None) -> BaseException | None:
    """The error inside `exc` that Dynamo answers with a graph break when a backend raises it
    (`torch._dynamo.exc.exceptions_allowed_to_be_fallback`: a fake tensor's data-dependent output
    or unsupported op), or None."""
    import torch._dynamo.exc

    kinds = getattr(torch._dynamo.exc, "exceptions_allowed_to_be_fallback", ())
    return find_error(exc, kinds) if kinds else None


def dynamo_splits_on_backend_errors() -> bool:
    """Will Dynamo answer a `graph_break_error` from the backend it is calling now with a graph
    break? Not when the graph holds a function the user marked `allow_in_graph` (Dynamo then
    raises BackendCompilerFailed), nor when this cannot be told (another torch): False."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        return not InstructionTranslator.current_tx().output.has_user_defined_allowed_in_graph
    except Exception:  # noqa: BLE001 - no translator, or another torch's internals
        return False


def find_pipec_error(exc: BaseException | None) -> PipecError | None:
    """The PipecError inside `exc` (Dynamo wraps backend errors in BackendCompilerFailed)."""
    return find_error(exc, PipecError)


class PipecPluginError(PipecError):
    """The plugin machinery was used in a way it cannot honour (e.g. `pipec.get_registry()` from
    inside a registration hook); the message says what to do instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message, stage="plugins")
