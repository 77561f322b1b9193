"""pipec_ir: the contract between pipec's stages.

Three immutable documents (`Graph`, `KernelPlan`, `Program`), their canonical JSON
(`dumps` / `loads` / `digest`), a readable text form, `verify`, the plugin
hookspecs, the `Registry`, the stage Protocols, `CompileOptions` and `LoadContext`.
No torch, no triton.
"""

from .budget import (
    BUCKET_POLICIES, DEFAULT_RECOMPILE_LIMIT, RecompileBudget, RecompileLimitError, RecompileLimitWarning,
    bucket_of,
)
from .errors import (
    AttributeTypeError, CacheError, IRError, MalformedIRError, TypeMismatchError, UnsupportedVersionError, VerifyError,
    WrongKindError,
)
from .hookspecs import hookimpl, hookspec
from .load_context import LoadContext, load_with
from .ops import INTENDED_EXTERN_REASONS, OPS, OpDef, kind_of
from .options import CompileOptions
from .profile import CompileProfile
from .protocols import Cache, CacheAdmin, Capture, Codegen, Fusion, Runtime
from .registry import Entry, Registry, UnknownStageError
from .serialize import FORMAT, VERSION, digest, dumps, loads
from .text import format_document
from .types import (
    DTYPES, FLOAT_DTYPES, ITEMSIZE, Buffer, Device, Dtype, FusionDecision, Graph, GraphInput, Kernel,
    MAXNREG_CONSTANT, TMA_CONSTANT, KernelPlan, LaunchConfig, Node, Program, Ref, RejectedFusion, ref_names, renamed_refs, Size, Slot, Step, SymbolRange,
    TensorType, TritonKernel, attr_expr, get_attr, make_attrs, size_attr,
)
from .verify import is_multi_result, verify

__version__ = "0.1.0"

__all__ = [
    "BUCKET_POLICIES", "DEFAULT_RECOMPILE_LIMIT", "RecompileBudget", "RecompileLimitError",
    "RecompileLimitWarning", "bucket_of",
    "AttributeTypeError", "CacheError", "IRError", "MalformedIRError", "TypeMismatchError", "UnsupportedVersionError",
    "VerifyError", "WrongKindError",
    "hookimpl", "hookspec", "LoadContext", "load_with", "INTENDED_EXTERN_REASONS", "OPS", "OpDef", "kind_of", "CompileOptions", "CompileProfile",
    "Cache", "CacheAdmin", "Capture", "Codegen", "Fusion", "Runtime", "Entry", "Registry", "UnknownStageError",
    "FORMAT", "VERSION", "digest", "dumps", "loads", "format_document",
    "DTYPES", "FLOAT_DTYPES", "ITEMSIZE", "Buffer", "Device", "Dtype", "FusionDecision", "Graph",
    "GraphInput", "Kernel", "KernelPlan", "LaunchConfig", "MAXNREG_CONSTANT", "TMA_CONSTANT", "Node", "Program", "Ref", "RejectedFusion", "ref_names", "renamed_refs",
    "Size", "Slot", "Step", "SymbolRange", "TensorType", "TritonKernel", "attr_expr", "get_attr", "make_attrs",
    "size_attr",
    "is_multi_result", "verify",
]
