"""pipec: compile PyTorch programs into fused Triton kernels.

    compiled = pipec.compile(model)                 # like torch.compile
    report = pipec.explain(model, *example_inputs)  # graphs, kernels, fusions, externs...
    torch.compile(model, backend="pipec")           # once pipec is installed
"""

from .api import ExplainReport, compile, explain, make_options
from .backend import pipec_backend
from .errors import PipecError, PipecFallbackWarning, PipecPluginWarning
from .pipeline import PIPELINE, Session, compile_graph
from .plugins import get_plugin_manager, get_registry, reset_plugins

__version__ = "0.1.0"

__all__ = ["ExplainReport", "PIPELINE", "PipecError", "PipecFallbackWarning", "PipecPluginWarning", "Session", "compile",
           "compile_graph", "explain", "get_plugin_manager", "get_registry", "make_options",
           "pipec_backend", "reset_plugins", "__version__"]
