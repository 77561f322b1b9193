"""The diffusion models of the real-model suite (diffusers_models.py), tiny, on the CPU, against
eager (float32, fixed seeds, kernels in Triton's interpreter):

* inference as diffusers recommends compiling a denoiser: `fullgraph=True`, no graph break,
  no fallback warning;
* a training step (fine-tuning a denoiser): the output and every parameter's gradient;
* new resolutions through one compiled model: a second size makes Dynamo's graph dynamic, a
  third reuses it; each matches eager.

The whole sweep (every case in every mode): benchmarks/diffusers_sweep.py.
"""

import contextlib
import warnings

import pytest
import torch

import diffusers_models as dm
import pipec

TRAINED = ("sd15_unet", "sd3_medium", "flux")
# the UNets match at new resolutions too (benchmarks/diffusers_sweep.py --resize), but their
# GroupNorm kernels at symbolic sizes take minutes in the interpreter (index math that divides
# by the symbolic spatial size, see docs/performance.md): the sweep runs them, CI does not
RESIZED = ("sd3_medium",)


@contextlib.contextmanager
def no_fallback():
    """Any pipec fallback (an extern with no lowering, a graph run eagerly) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        yield


@pytest.mark.parametrize("name", [c.name for c in dm.CASES])
def test_inference_fullgraph(name):
    built = dm.build(name)
    with torch.no_grad():
        expected = built.model(*built.inputs)
        with no_fallback():
            got = pipec.compile(built.model, fullgraph=True)(*built.inputs)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", TRAINED)
def test_training_step_gradients(name):
    eager = dm.build(name, train=True)
    mine = dm.build(name, train=True)  # the same seed: the same weights
    expected = eager.model(*eager.inputs)
    (expected.float() ** 2).mean().backward()
    with no_fallback():
        got = pipec.compile(mine.model)(*mine.inputs)
        (got.float() ** 2).mean().backward()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    for (pname, p), q in zip(mine.model.named_parameters(), eager.model.parameters()):
        if q.grad is None:
            assert p.grad is None, pname
            continue
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-3, msg=lambda m, n=pname: f"{n}: {m}")


@pytest.mark.parametrize("name", RESIZED)
def test_new_resolutions_share_one_dynamic_graph(name):
    built = dm.build(name)
    compiled = pipec.compile(built.model)
    g = torch.Generator().manual_seed(3)
    latents = built.inputs[0]
    for side in (8, 16, 12):
        resized = torch.randn(*latents.shape[:-2], side, side, generator=g)
        inputs = (resized, *built.inputs[1:])
        with torch.no_grad():
            expected = built.model(*inputs)
            with no_fallback():
                got = compiled(*inputs)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_dit_at_new_resolutions_under_dynamic_shapes():
    """DiT unpatchifies with `int(seq ** 0.5)`: float arithmetic on sizes that ends in a size.
    Called at a new resolution, Dynamo retraces with the latents' height and width as two
    symbols, and the grid's side is IntSqrt(h/2 * w/2), evaluated on the host: the graph
    compiles instead of running eagerly (dynamic=True with square latents: one symbol, and the
    side is h/2 itself)."""
    built = dm.build("dit_xl2")
    g = torch.Generator().manual_seed(4)
    for compiled, sides in ((pipec.compile(built.model), (8, 16, 12)), (pipec.compile(built.model, dynamic=True), (16, 12))):
        for side in sides:
            inputs = (torch.randn(2, 4, side, side, generator=g), *built.inputs[1:])
            with torch.no_grad(), no_fallback():
                got = compiled(*inputs)
            torch.testing.assert_close(got, built.model(*inputs), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", [c.name for c in dm.CASES])
def test_real_size_inputs_fit_the_real_model(name):
    """The GPU suite's real-size case builds, and its inputs fit the model: a forward on the meta
    device (shapes only, no memory) runs and returns a prediction of the latents' batch."""
    built = dm.build(name, dm.REAL, device="meta")
    with torch.no_grad():
        out = built.model(*built.inputs)
    assert out.device.type == "meta" and out.dtype == torch.bfloat16
    assert out.shape[0] == built.inputs[0].shape[0]


@pytest.mark.parametrize("name", ["sd15_unet", "sd_vae_decoder"])
def test_bf16_convs_on_nhwc_operands_in_tiles_match_eager(name, monkeypatch, tmp_path):
    """The UNet and the VAE decoder in bfloat16 with capture's conv_layouts.py (CUDA-only, here
    switched on for the CPU) and codegen's tiled transposes (on by default; tiled here
    from a lower size than on a GPU so these small copies are tiled too): every conv reads
    NHWC operands, the copies run in tiles, and the output matches eager's."""
    from pipec_capture import conv_bias, conv_layouts, lowerer
    from pipec_codegen_triton import tiling

    monkeypatch.setattr(conv_bias, "SPLIT_ON", ("cuda", "cpu"))
    monkeypatch.setattr(conv_layouts, "LAYOUT_ON", ("cuda", "cpu"))
    monkeypatch.setattr(tiling, "MIN_TILED_NUMEL", 256)
    rewritten = []
    monkeypatch.setattr(lowerer, "convs_channels_last",
                        lambda gm: rewritten.append(conv_layouts.convs_channels_last(gm)) or rewritten[-1])
    built = dm.build(name)
    model = built.model.to(torch.bfloat16)
    inputs = tuple(x.to(torch.bfloat16) if x.is_floating_point() else x for x in built.inputs)
    with torch.no_grad():
        expected = model(*inputs)
        with no_fallback():
            got = pipec.compile(model, fullgraph=True, dump_dir=str(tmp_path))(*inputs)
    assert rewritten and rewritten[0] > 10
    assert "YBLOCK" in next(tmp_path.glob("*.codegen.txt")).read_text()
    # bf16 through a whole network, where the interpreter rounds to bf16 by truncation: eager
    # against pipec without these passes differs as much (0.016 and 0.020 on these inputs)
    torch.testing.assert_close(got, expected, atol=5e-2, rtol=5e-2)
