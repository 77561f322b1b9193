"""pipec_capture: PyTorch (Dynamo + AOTAutograd, or torch.export) -> pipec_ir.Graph.

`lower_graph` lowers an ATen-level fx GraphModule through a table of lowerings
(`LOWERINGS`, one row per ATen overload); any other op becomes an `extern` node.
`reference.run_graph` evaluates a Graph with torch ops (the executable meaning of
docs/IR.md, used by tests).
"""

from .aot import core_decompositions, make_dynamo_backend
from .errors import CaptureError
from .lowerer import constant_bindings, lower_graph
from .table import LIBRARY_OPS, LOWERINGS

__version__ = "0.1.0"

__all__ = ["CaptureError", "LIBRARY_OPS", "LOWERINGS", "constant_bindings", "core_decompositions", "lower_graph",
           "make_dynamo_backend", "__version__"]
