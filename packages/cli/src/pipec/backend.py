"""pipec as a torch.compile backend.

`torch.compile(model, backend="pipec")` finds `pipec_backend` through the
`torch_dynamo_backends` entry point; `pipec.compile` binds options with
`make_backend`. Dynamo hands each captured graph to the capture stage's
`dynamo_backend`, which lowers it to ATen (AOTAutograd) and calls back
`compile_aten_graph` for the pipeline proper.
"""

from __future__ import annotations

from pipec_ir import CompileOptions

from .errors import PipecError
from .pipeline import Session, compile_graph
from .plugins import get_registry


def make_backend(options: CompileOptions, session: Session | None = None, prefix: str = "graph"):
    """A torch.compile backend that runs the pipeline with `options`, recording into `session`."""
    session = session if session is not None else Session()

    def backend(gm, example_inputs, **_ignored):
        index = session.dynamo_graphs
        session.dynamo_graphs += 1
        capture = get_registry().get("capture", options.capture)
        dynamo_backend = getattr(capture, "dynamo_backend", None)
        if dynamo_backend is None:
            raise PipecError(f"capture ({options.capture}) cannot run under torch.compile: it has no "
                             f"dynamo_backend; use capture 'dynamo'", stage="capture", impl=options.capture)

        def compile_aten_graph(aten_gm, aten_inputs, kind="inference"):
            name = f"{prefix}_{index}" if kind in ("inference", "forward", None) else f"{prefix}_{index}_{kind}"
            return compile_graph(aten_gm, aten_inputs, options, session=session, name=name)

        return dynamo_backend(compile_aten_graph)(gm, example_inputs)

    backend.pipec_options = options
    backend.pipec_session = session
    return backend


def pipec_backend(gm, example_inputs, mode=None, options=None, **kwargs):
    """The `backend="pipec"` entry point: torch.compile(model, backend="pipec", options={...})."""
    from .api import make_options

    merged = dict(options or {})
    merged.update(kwargs)
    opts = make_options(mode=mode or "default", **merged)
    return make_backend(opts)(gm, example_inputs)
