"""Capture's extern reasons against the IR's list of intended ones (pipec_ir.INTENDED_EXTERN_REASONS):
the reasons capture gives on purpose are in it, so fullgraph allows them and nobody warns; a
missing lowering is not."""

import pipec_ir
from pipec_capture.lower_random import FALLBACK_RANDOM
from pipec_capture.table import CUSTOM_OP, extern_reason


def test_intended_reasons_are_the_irs():
    assert {"library", FALLBACK_RANDOM, CUSTOM_OP} == set(pipec_ir.INTENDED_EXTERN_REASONS)
    assert extern_reason("aten.convolution.default") in pipec_ir.INTENDED_EXTERN_REASONS
    assert extern_reason("transformers.grouped_mm_fallback.default") == CUSTOM_OP
    assert extern_reason("aten.median.default") not in pipec_ir.INTENDED_EXTERN_REASONS
    # dense linear algebra is LAPACK's / cuSOLVER's (Qwen3-Next's chunked triangular solve)
    assert extern_reason("aten.linalg_solve_triangular.default") == "library"
    assert extern_reason("aten._linalg_check_errors.default") == "library"
