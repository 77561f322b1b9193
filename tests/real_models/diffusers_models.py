"""The real-model suite's diffusion models: HuggingFace diffusers' denoisers and autoencoders,
built from a config with random (seeded) weights, nothing downloaded.

Diffusion models are where users reach for `torch.compile` first (the UNet or transformer runs
once per denoising step, tens of steps per image), with `fullgraph=True` and often dynamic
resolutions. Each case has

* a **tiny** config (widths 16-64, one or two blocks, 8 x 8 latents, float32): CI runs it on the
  CPU, kernels in Triton's interpreter (tests/real_models/test_diffusers_models.py), and
  `benchmarks/diffusers_sweep.py` runs every case in inference, fullgraph, training and at
  three resolutions;
* a **real** size: the class's default config, which is the published model's (Stable Diffusion
  1.5's UNet with its text width, Flux.1-schnell's transformer, DiT-XL/2's shape) or the one named, at the latent
  size and batch a user generates with (2: classifier-free guidance), bf16, for the H200
  (`PIPEC_HF_MODEL=sd15_unet pipec bench benchmarks/models/hf_model.py`).

`build(name, size)` returns hf_models.Built: `model(*inputs)` returns the denoiser's prediction
(or the decoded image) as a plain tensor.

    python tests/real_models/diffusers_models.py     # list the cases
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # hf_models, also when loaded by path

import diffusers  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from hf_models import REAL, REAL_TOLERANCE, TINY, Built  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    what: str  # the published model the real config is
    model_class: str  # a diffusers class
    tiny_config: dict
    real_config: dict  # {} : the class's defaults
    inputs: Callable[[nn.Module, bool, torch.Generator], dict]  # (model, tiny?, generator) -> inputs
    call: str = "forward"  # the method run: "decode" for an autoencoder's decoder
    train: bool = True  # CI runs a training step of it
    resizable: bool = True  # its first input is latents [..., h, w] (Flux's are packed tokens)


def _randn(g, *shape):
    return torch.randn(*shape, generator=g)


def _timesteps(batch):
    return torch.tensor([10, 500, 900, 250][:batch])


def _unet_inputs(model, tiny, g):
    c = model.config
    side, batch, tokens = (8, 2, 7) if tiny else (c.sample_size, 2, 77)
    inputs = {"sample": _randn(g, batch, c.in_channels, side, side), "timestep": _timesteps(batch),
              "encoder_hidden_states": _randn(g, batch, tokens, c.cross_attention_dim)}
    if c.addition_embed_type == "text_time":  # SDXL: pooled text and the size / crop conditioning
        pooled = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim
        inputs["added_cond_kwargs"] = {"text_embeds": _randn(g, batch, pooled),
                                       "time_ids": torch.tensor([[side * 8.0, side * 8.0, 0, 0, side * 8.0, side * 8.0]] * batch)}
    return inputs


def _vae_decode_inputs(model, tiny, g):
    c = model.config
    side = 8 if tiny else c.sample_size // 8
    return {"z": _randn(g, 1, c.latent_channels, side, side)}


def _dit_inputs(model, tiny, g):
    c = model.config
    return {"hidden_states": _randn(g, 2, c.in_channels, c.sample_size, c.sample_size), "timestep": _timesteps(2),
            "class_labels": torch.tensor([1, 7])}


def _sd3_inputs(model, tiny, g):
    c = model.config
    side, tokens = (8, 5) if tiny else (c.sample_size, 333)  # CLIP's 77 + T5's 256 prompt tokens
    return {"hidden_states": _randn(g, 2, c.in_channels, side, side),
            "encoder_hidden_states": _randn(g, 2, tokens, c.joint_attention_dim),
            "pooled_projections": _randn(g, 2, c.pooled_projection_dim), "timestep": _timesteps(2)}


def _flux_inputs(model, tiny, g):
    c = model.config
    side, tokens, batch = (4, 5, 2) if tiny else (64, 512, 1)  # 1024 x 1024 images: 64 x 64 packed latents
    img_ids = torch.zeros(side * side, 3)
    img_ids[:, 1] = torch.arange(side * side) // side
    img_ids[:, 2] = torch.arange(side * side) % side
    return {"hidden_states": _randn(g, batch, side * side, c.in_channels),
            "encoder_hidden_states": _randn(g, batch, tokens, c.joint_attention_dim),
            "pooled_projections": _randn(g, batch, c.pooled_projection_dim),
            "timestep": torch.tensor([0.1, 0.7][:batch]), "img_ids": img_ids, "txt_ids": torch.zeros(tokens, 3)}


def _wan_inputs(model, tiny, g):
    c = model.config
    frames, height, width, tokens = (2, 8, 8, 5) if tiny else (5, 60, 104, 512)  # 480p, 17 frames
    return {"hidden_states": _randn(g, 1, c.in_channels, frames, height, width), "timestep": torch.tensor([500]),
            "encoder_hidden_states": _randn(g, 1, tokens, c.text_dim)}


_TINY_UNET = dict(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
                  cross_attention_dim=32, norm_num_groups=8)

CASES: tuple[Case, ...] = (
    Case("sd15_unet", "Stable Diffusion 1.5's UNet, 64 x 64 latents", "UNet2DConditionModel",
         dict(_TINY_UNET, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
              up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=8),
         dict(cross_attention_dim=768, sample_size=64), _unet_inputs),
    Case("sdxl_unet", "SDXL's UNet, 128 x 128 latents", "UNet2DConditionModel",
         dict(_TINY_UNET, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
              up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=(2, 4), use_linear_projection=True,
              addition_embed_type="text_time", addition_time_embed_dim=8, projection_class_embeddings_input_dim=8 * 6 + 32,
              transformer_layers_per_block=(1, 2)),
         dict(sample_size=128, block_out_channels=(320, 640, 1280),
              down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
              up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
              transformer_layers_per_block=(1, 2, 10), attention_head_dim=(5, 10, 20), cross_attention_dim=2048,
              use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=256,
              projection_class_embeddings_input_dim=2816),
         _unet_inputs, train=False),
    Case("sd_vae_decoder", "Stable Diffusion's VAE decoder, 64 x 64 latents to 512 x 512", "AutoencoderKL",
         dict(block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
              up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, norm_num_groups=8, sample_size=64),
         dict(block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
              up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2, sample_size=512),
         _vae_decode_inputs, call="decode", train=False),
    Case("dit_xl2", "DiT-XL/2's shape (the class's defaults), 256 x 256 images", "DiTTransformer2DModel",
         dict(num_attention_heads=2, attention_head_dim=16, in_channels=4, num_layers=2, sample_size=8, patch_size=2,
              norm_num_groups=8),
         {}, _dit_inputs),
    Case("sd3_medium", "SD3-medium's transformer, 1024 x 1024", "SD3Transformer2DModel",
         dict(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
              joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=16, out_channels=4,
              pos_embed_max_size=16),
         dict(num_layers=24, num_attention_heads=24, caption_projection_dim=1536, pos_embed_max_size=192),
         _sd3_inputs),
    Case("flux", "Flux.1-schnell's transformer (the class's defaults), 1024 x 1024", "FluxTransformer2DModel",
         dict(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
              num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 6, 6)),
         {}, _flux_inputs, resizable=False),
    Case("wan_1_3b", "Wan 2.1 1.3B's transformer, 17 frames at 480p", "WanTransformer3DModel",
         dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
              text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=32),
         dict(num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16, text_dim=4096,
              freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True, qk_norm="rms_norm_across_heads"),
         _wan_inputs),
)
BY_NAME = {c.name: c for c in CASES}


class Prediction(nn.Module):
    """`model.<call>(**dict(zip(names, args)))`'s tensor: `sample` of a diffusers output."""

    def __init__(self, model: nn.Module, call: str, input_names: tuple[str, ...], extra: dict):
        super().__init__()
        self.model = model
        self.call = call
        self.input_names = input_names
        self.extra = extra  # inputs that are no tensors (SDXL's added_cond_kwargs dict)

    def forward(self, *args):
        out = getattr(self.model, self.call)(**dict(zip(self.input_names, args)), **self.extra)
        return out.sample if hasattr(out, "sample") else out[0]


def _model(case: Case, tiny: bool, device, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    with torch.device(device):
        return getattr(diffusers, case.model_class)(**(case.tiny_config if tiny else case.real_config))


def build(name: str, size: str = TINY, device: str | torch.device = "cpu", seed: int = 0, train: bool = False) -> Built:
    """Case `name` at `size` on `device` (float32 tiny, bf16 real), in eval mode (train mode with
    `train`: the caller takes a loss of the prediction)."""
    case = BY_NAME[name]
    tiny = size == TINY
    dtype = torch.float32 if tiny else torch.bfloat16
    model = _model(case, tiny, device, seed).to(dtype)
    inputs = case.inputs(model, tiny, torch.Generator().manual_seed(seed + 1))
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    extra = {k: _to(v, device, dtype) for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
    wrapped = Prediction(model, case.call, tuple(tensors), extra).train(train)
    values = tuple(_to(t, device, dtype) for t in tensors.values())
    return Built(name, size, wrapped, values, tuple(tensors), dtype, None if tiny else REAL_TOLERANCE[dtype])


def _to(value, device, dtype):
    if isinstance(value, dict):
        return {k: _to(v, device, dtype) for k, v in value.items()}
    return value.to(device, dtype if value.is_floating_point() else value.dtype)


def parameter_count(name: str, size: str = REAL) -> int:
    return sum(p.numel() for p in _model(BY_NAME[name], size == TINY, "meta", 0).parameters())


if __name__ == "__main__":
    for c in CASES:
        print(f"{c.name:16} {c.model_class:24} {parameter_count(c.name) / 1e6:9.1f}M  real: {c.what}")
