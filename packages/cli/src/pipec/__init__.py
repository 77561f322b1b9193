"""pipec: compile PyTorch programs into fused Triton kernels.

    compiled = pipec.compile(model)                 # like torch.compile
    report = pipec.explain(model, *example_inputs)  # graphs, kernels, fusions, externs...
    torch.compile(model, backend="pipec")           # once pipec is installed
    pipec.export(model, example_inputs, "m.pipec")  # one artifact file (torch.export, whole graph)
    model = pipec.load("m.pipec")                   # run it with the runtime package alone
"""

from .api import ExplainReport, compile, explain, make_options
from .artifact import ExportResult, export, load
from .backend import pipec_backend
from .cache import CacheError, PipecCacheWarning  # the compile cache (pipec.cache)
from .errors import PipecConfigError, PipecError, PipecFallbackWarning, PipecPluginError, PipecPluginWarning
from .pipeline import PIPELINE, Session, compile_graph
from .plugins import get_plugin_manager, get_registry, reset_plugins
from pipec_ir import RecompileLimitError, RecompileLimitWarning  # the recompile budget (dynamic shapes)

__version__ = "0.1.0"

__all__ = ["ExplainReport", "ExportResult", "export", "load", "PIPELINE", "PipecConfigError", "PipecError", "PipecFallbackWarning", "PipecPluginError", "PipecPluginWarning", "Session", "compile",
           "compile_graph", "explain", "get_plugin_manager", "get_registry", "make_options",
           "pipec_backend", "reset_plugins", "RecompileLimitError", "RecompileLimitWarning", "__version__",
           "CacheError", "PipecCacheWarning"]
