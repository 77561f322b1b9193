"""Functional collectives pipec cannot express stay externs (docs/IR.md, "Collectives"); the
lowerings that can run are tested on 2 gloo ranks in tests/test_distributed.py."""

import pytest
from pipec_ir import Ref

from pipec_capture.lower_collectives import lower_all_reduce, lower_reduce_scatter
from pipec_capture.table import LOWERINGS, NoLowering


def test_every_functional_collective_has_a_row():
    for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
               "wait_tensor"):
        assert f"_c10d_functional.{op}.default" in LOWERINGS


def test_a_group_passed_as_an_object_stays_extern():
    with pytest.raises(NoLowering, match="process group given as object, not by name"):
        lower_all_reduce(None, None, Ref("x"), "sum", object())


def test_an_unknown_reduce_op_stays_extern():
    with pytest.raises(NoLowering, match="reduce op 'premul_sum'"):
        lower_reduce_scatter(None, None, Ref("x"), "premul_sum", 2, "0")
