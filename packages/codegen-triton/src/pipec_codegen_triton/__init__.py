"""pipec_codegen_triton: KernelPlan -> Program with Triton source for every kernel."""

from .generate import TritonCodegen, generate_program
from .kernel_source import CodegenError

__version__ = "0.1.0"
__all__ = ["TritonCodegen", "generate_program", "CodegenError"]
