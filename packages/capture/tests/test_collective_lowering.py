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


def _graph_with_mesh_input(read_by_an_op: bool):
    """`(x + x, mesh)` as AOTAutograd's forward under tensor parallel has it (the DeviceMesh a
    FakeScriptObject input, saved for the backward graph); or a graph whose op reads the mesh."""
    import torch
    import torch.fx
    from torch._library.fake_class_registry import FakeScriptObject

    g = torch.fx.Graph()
    x, mesh = g.placeholder("x"), g.placeholder("mesh")
    x.meta["val"] = torch.empty(2, 3)
    mesh.meta["val"] = FakeScriptObject(object(), "torch.distributed.device_mesh.DeviceMesh", None)
    y = g.call_function(torch.ops.aten.add.Tensor, (x, mesh if read_by_an_op else x))
    y.meta["val"] = torch.empty(2, 3)
    g.output((y, mesh))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_an_object_input_handed_on_is_no_graph_input():
    from pipec_capture.lowerer import Lowerer

    graph = Lowerer(_graph_with_mesh_input(False)).run()
    assert [i.name for i in graph.inputs] == ["x"]
    assert graph.outputs[1] is None and graph.outputs[0] is not None


def test_an_object_input_read_by_an_op_is_a_one_line_error():
    from pipec_capture.errors import CaptureError
    from pipec_capture.lowerer import Lowerer

    with pytest.raises(CaptureError, match="reads input mesh, a DeviceMesh object; pipec passes") as e:
        Lowerer(_graph_with_mesh_input(True)).run()
    assert "\n" not in str(e.value)
