"""Registers the built-in `triton` code generator."""

import pipec_ir

from .generate import TritonCodegen


@pipec_ir.hookimpl
def pipec_register(registry):
    registry.add_codegen("triton", TritonCodegen())
