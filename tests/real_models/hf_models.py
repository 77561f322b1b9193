"""The real-model suite's registry: HuggingFace transformers architectures, built from a config.

Every model has random weights (seeded) and is built from its config alone, so nothing is
downloaded (HF_HUB_OFFLINE=1 is set before transformers is imported). Each architecture has

* a **tiny** config: hidden 32, one layer (of each stack), 8-16 tokens, batch 2, float32; CI runs it on the
  CPU, where pipec's kernels run in Triton's interpreter (tests/real_models/test_real_models.py);
* one or more **real** sizes: the architecture's published base config at a batch and length
  a user would run it with, for the H200 (benchmarks/real_models.py runs them through `pipec bench`).

`build(name, size)` returns a `Built`: the model in eval mode, wrapped so that
`model(*inputs)` works and returns plain tensors (logits, last_hidden_state...), and its
example inputs. Decoder-only and encoder-decoder models run as transformers runs them by
default, with `use_cache` on: their forward builds a KV cache (DynamicCache) it returns, which
the wrapper drops. `build_training(name)` returns the tiny model (`size=REAL`: the published config, fp32) in train mode, returning its
loss (labels among the inputs), for the architectures with `train=True`.

    python tests/real_models/hf_models.py            # list the cases
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: never reach the hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import transformers
from torch import nn

TINY = "tiny"
REAL = "real"


@dataclass(frozen=True)
class Shape:
    """The inputs of one size: batch, length (tokens, image side, audio samples) and dtype."""
    batch: int
    length: int
    dtype: torch.dtype = torch.float32
    target_length: int | None = None  # encoder-decoders: decoder tokens


@dataclass(frozen=True)
class Arch:
    name: str
    family: str  # encoder, decoder, encoder-decoder, vision, conv, speech
    what: str  # the published config the real size copies
    config: Callable[[bool], transformers.PretrainedConfig]  # tiny? -> config
    model_class: str  # transformers class run for inference
    inputs: Callable[[transformers.PretrainedConfig, Shape, torch.Generator], dict[str, torch.Tensor]]
    outputs: tuple[str, ...]  # fields of the model's output compared with eager
    tiny: Shape
    real: dict[str, Shape]  # case name -> shape; the first is the architecture's main real case
    train_class: str | None = None  # transformers class of the training step (None: no training step)
    labels: Callable[[transformers.PretrainedConfig, Shape, torch.Generator], torch.Tensor] | None = None


@dataclass
class Built:
    name: str
    size: str
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...]
    dtype: torch.dtype
    tolerance: dict[str, float] | None  # None: assert_close's defaults for the dtype


class Outputs(nn.Module):
    """`model(**dict(zip(names, args)))`, returning the chosen output fields as plain tensors."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...], output_names: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.output_names = output_names

    def forward(self, *args):
        out = self.model(**dict(zip(self.input_names, args)))
        picked = tuple(out[name] for name in self.output_names)
        return picked[0] if len(picked) == 1 else picked


# ---------------------------------------------------------------- inputs


def _ids(config, shape: Shape, g: torch.Generator, length: int | None = None) -> torch.Tensor:
    # ids from 3 up: clear of the usual pad / bos / eos ids (0-2) of these configs
    return torch.randint(3, config.vocab_size, (shape.batch, length or shape.length), generator=g)


def _padded_mask(shape: Shape) -> torch.Tensor:
    """All ones but the last sample's last quarter: the attention mask takes part."""
    mask = torch.ones(shape.batch, shape.length, dtype=torch.long)
    if shape.batch > 1:
        mask[-1, shape.length - max(1, shape.length // 4):] = 0
    return mask


def text_inputs(config, shape, g):
    return {"input_ids": _ids(config, shape, g), "attention_mask": _padded_mask(shape)}


def lm_inputs(config, shape, g):
    return {"input_ids": _ids(config, shape, g)}


def seq2seq_inputs(config, shape, g):
    return {"input_ids": _ids(config, shape, g), "attention_mask": _padded_mask(shape),
            "decoder_input_ids": _ids(config, shape, g, shape.target_length)}


def whisper_inputs(config, shape, g):
    # Whisper's encoder takes exactly 2 * max_source_positions mel frames
    frames = 2 * config.max_source_positions
    return {"input_features": torch.randn(shape.batch, config.num_mel_bins, frames, generator=g, dtype=shape.dtype),
            "decoder_input_ids": _ids(config, shape, g, shape.target_length)}


def image_inputs(config, shape, g):
    return {"pixel_values": torch.randn(shape.batch, 3, shape.length, shape.length, generator=g, dtype=shape.dtype)}


def audio_inputs(config, shape, g):
    return {"input_values": torch.randn(shape.batch, shape.length, generator=g, dtype=shape.dtype)}


def token_labels(config, shape, g):
    return _ids(config, shape, g)


def seq2seq_labels(config, shape, g):
    return _ids(config, shape, g, shape.target_length)


def class_labels(config, shape, g):
    return torch.randint(0, config.num_labels, (shape.batch,), generator=g)


# ---------------------------------------------------------------- configs

NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _cfg(cls: str, tiny_kwargs: dict, real_kwargs: dict | None = None, common: dict | None = None):
    def make(tiny: bool):
        return getattr(transformers, cls)(**(common or {}), **(tiny_kwargs if tiny else (real_kwargs or {})))
    return make


BF16 = torch.bfloat16
# Real sizes' check against eager (pipec bench's `tolerance`), by dtype. bf16: a whole model
# rounds every op's output in eager but keeps fused intermediates in fp32 in compiled code;
# over 6-24 layers that moves logits of magnitude ~5 by a few bf16 ulps (0.03 each). This
# catches wrong results, not rounding; the table reports each backend's max error.
# fp32: matmuls may use TF32 on the GPU.
REAL_TOLERANCE = {torch.bfloat16: {"atol": 5e-2, "rtol": 5e-2}, torch.float32: {"atol": 1e-3, "rtol": 1e-3}}

ARCHS: tuple[Arch, ...] = (
    # -------- BERT-like encoders
    Arch("bert", "encoder", "bert-base-uncased",
         _cfg("BertConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=32, **NO_DROPOUT)),
         "BertModel", text_inputs, ("last_hidden_state", "pooler_output"),
         tiny=Shape(2, 8), real={"bert": Shape(8, 512, BF16)},
         train_class="BertForMaskedLM", labels=token_labels),
    # issue 19's BERT-large target (<= 0.65x eager's time); its tiny config has two layers
    Arch("bert_large", "encoder", "bert-large-uncased",
         _cfg("BertConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=32, **NO_DROPOUT),
              dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096, **NO_DROPOUT)),
         "BertModel", text_inputs, ("last_hidden_state", "pooler_output"),
         tiny=Shape(2, 8), real={"bert_large": Shape(8, 512, BF16)}),
    Arch("roberta", "encoder", "roberta-base",
         _cfg("RobertaConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=64, max_position_embeddings=32, type_vocab_size=1, **NO_DROPOUT),
              dict(max_position_embeddings=514, type_vocab_size=1)),
         "RobertaForMaskedLM", text_inputs, ("logits",),
         tiny=Shape(2, 8), real={"roberta": Shape(8, 512, BF16)}),
    Arch("distilbert", "encoder", "distilbert-base-uncased",
         _cfg("DistilBertConfig", dict(vocab_size=128, dim=32, n_layers=1, n_heads=2, hidden_dim=64,
                                       max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
                                       seq_classif_dropout=0.0)),
         "DistilBertForSequenceClassification", text_inputs, ("logits",),
         tiny=Shape(2, 8), real={"distilbert": Shape(8, 512, BF16)}),
    # -------- decoder-only LMs (KV cache on: use_cache is their default)
    Arch("gpt2", "decoder", "gpt2 (124M)",
         _cfg("GPT2Config", dict(vocab_size=128, n_positions=32, n_embd=32, n_layer=1, n_head=2, resid_pdrop=0.0,
                                 embd_pdrop=0.0, attn_pdrop=0.0)),
         "GPT2LMHeadModel", lm_inputs, ("logits",),
         tiny=Shape(2, 8), real={"gpt2": Shape(1, 128), "gpt2-4x1024-bf16": Shape(4, 1024, BF16)},
         train_class="GPT2LMHeadModel", labels=token_labels),
    Arch("llama", "decoder", "Llama-3.2-1B",
         _cfg("LlamaConfig", dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32),
              dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                   num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                   rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)),
         "LlamaForCausalLM", lm_inputs, ("logits",),
         tiny=Shape(2, 8), real={"llama": Shape(4, 512, BF16)}),
    Arch("gpt_neox", "decoder", "pythia-160m",
         _cfg("GPTNeoXConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=64, rotary_pct=0.25, max_position_embeddings=32),
              dict(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072, rotary_pct=0.25, max_position_embeddings=2048)),
         "GPTNeoXForCausalLM", lm_inputs, ("logits",),
         tiny=Shape(2, 8), real={"gpt_neox": Shape(4, 1024, BF16)}),
    Arch("qwen2", "decoder", "Qwen2-0.5B",
         _cfg("Qwen2Config", dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32),
              dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                   num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                   rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)),
         "Qwen2ForCausalLM", lm_inputs, ("logits",),
         tiny=Shape(2, 8), real={"qwen2": Shape(4, 512, BF16)}),
    Arch("phi", "decoder", "phi-1_5",
         _cfg("PhiConfig", dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                num_attention_heads=2, partial_rotary_factor=0.5, max_position_embeddings=32),
              dict(partial_rotary_factor=0.5)),
         "PhiForCausalLM", lm_inputs, ("logits",),
         tiny=Shape(2, 8), real={"phi": Shape(4, 512, BF16)}),
    Arch("opt", "decoder", "opt-125m",
         _cfg("OPTConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=32, dropout=0.0)),
         "OPTForCausalLM", lm_inputs, ("logits",),
         tiny=Shape(2, 8), real={"opt": Shape(4, 1024, BF16)}),
    # -------- encoder-decoders (decoder KV cache on)
    Arch("t5", "encoder-decoder", "t5-base",
         _cfg("T5Config", dict(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                               relative_attention_num_buckets=8, dropout_rate=0.0),
              dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12)),
         "T5ForConditionalGeneration", seq2seq_inputs, ("logits",),
         tiny=Shape(2, 8, target_length=8), real={"t5": Shape(8, 512, BF16, target_length=128)},
         train_class="T5ForConditionalGeneration", labels=seq2seq_labels),
    Arch("bart", "encoder-decoder", "bart-base",
         _cfg("BartConfig", dict(vocab_size=128, d_model=32, encoder_layers=1, decoder_layers=1,
                                 encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                 decoder_ffn_dim=64, max_position_embeddings=32, dropout=0.0),
              dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                   decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)),
         "BartForConditionalGeneration", seq2seq_inputs, ("logits",),
         tiny=Shape(2, 8, target_length=8), real={"bart": Shape(8, 512, BF16, target_length=128)}),
    Arch("whisper", "encoder-decoder", "whisper-base",
         _cfg("WhisperConfig", dict(vocab_size=128, d_model=32, encoder_layers=1, decoder_layers=1,
                                    encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                    decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=8,
                                    max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                    decoder_start_token_id=1),
              dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                   decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048)),
         "WhisperForConditionalGeneration", whisper_inputs, ("logits",),
         tiny=Shape(2, 0, target_length=8), real={"whisper": Shape(8, 0, BF16, target_length=128)}),
    # -------- vision transformers
    Arch("vit", "vision", "vit-base-patch16-224",
         _cfg("ViTConfig", dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=64, num_labels=10),
              dict(num_labels=1000)),
         "ViTForImageClassification", image_inputs, ("logits",),
         tiny=Shape(2, 16), real={"vit": Shape(32, 224, BF16)},
         train_class="ViTForImageClassification", labels=class_labels),
    Arch("deit", "vision", "deit-small-patch16-224",
         _cfg("DeiTConfig", dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=64, num_labels=10),
              dict(hidden_size=384, num_attention_heads=6, intermediate_size=1536, num_labels=1000)),
         "DeiTForImageClassificationWithTeacher", image_inputs, ("logits",),
         tiny=Shape(2, 16), real={"deit": Shape(32, 224, BF16)}),
    Arch("swin", "vision", "swin-tiny-patch4-window7-224",
         _cfg("SwinConfig", dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                                 window_size=4, num_labels=10),
              dict(num_labels=1000)),
         "SwinForImageClassification", image_inputs, ("logits",),
         tiny=Shape(2, 32), real={"swin": Shape(32, 224, BF16)}),
    # -------- conv nets
    Arch("resnet", "conv", "resnet-50",
         _cfg("ResNetConfig", dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                                   num_labels=10),
              dict(num_labels=1000)),
         "ResNetForImageClassification", image_inputs, ("logits",),
         tiny=Shape(2, 32), real={"resnet": Shape(32, 224, BF16)},
         train_class="ResNetForImageClassification", labels=class_labels),
    Arch("convnext", "conv", "convnext-tiny-224",
         _cfg("ConvNextConfig", dict(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10, image_size=32),
              dict(num_labels=1000)),
         "ConvNextForImageClassification", image_inputs, ("logits",),
         tiny=Shape(2, 32), real={"convnext": Shape(32, 224, BF16)}),
    # -------- speech
    Arch("wav2vec2", "speech", "wav2vec2-base",
         _cfg("Wav2Vec2Config", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                     conv_dim=[16, 16], conv_stride=[5, 2], conv_kernel=[10, 3],
                                     num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                                     hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0,
                                     layerdrop=0.0, final_dropout=0.0)),
         "Wav2Vec2Model", audio_inputs, ("last_hidden_state",),
         tiny=Shape(2, 400), real={"wav2vec2": Shape(4, 32000, BF16)}),
    Arch("hubert", "speech", "hubert-base-ls960",
         _cfg("HubertConfig", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                   conv_dim=[16, 16], conv_stride=[5, 2], conv_kernel=[10, 3],
                                   num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                                   hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0,
                                   layerdrop=0.0, final_dropout=0.0)),
         "HubertModel", audio_inputs, ("last_hidden_state",),
         tiny=Shape(2, 400), real={"hubert": Shape(4, 32000, BF16)}),
)

# Parameters (millions) of the published checkpoints the real sizes copy, as their model cards
# give them (test_real_models.py checks each real config against its count)
PUBLISHED_MILLIONS = {
    "bert": 110, "bert_large": 335, "roberta": 125, "distilbert": 66, "gpt2": 124, "llama": 1240, "gpt_neox": 162, "qwen2": 494,
    "phi": 1420, "opt": 125, "t5": 223, "bart": 139, "whisper": 74, "vit": 86, "deit": 22, "swin": 28,
    "resnet": 25.6, "convnext": 28.6, "wav2vec2": 95, "hubert": 95,
}

BY_NAME = {a.name: a for a in ARCHS}
TRAINING = tuple(a.name for a in ARCHS if a.train_class)


def real_cases() -> dict[str, tuple[Arch, Shape]]:
    """Every real-size case: case name -> (architecture, shape)."""
    return {case: (a, shape) for a in ARCHS for case, shape in a.real.items()}


def _arch_and_shape(name: str, size: str) -> tuple[Arch, Shape]:
    if size == TINY:
        if name not in BY_NAME:
            raise KeyError(f"unknown architecture {name!r} (known: {', '.join(BY_NAME)})")
        return BY_NAME[name], BY_NAME[name].tiny
    if size != REAL:
        raise ValueError(f"size must be {TINY!r} or {REAL!r}, not {size!r}")
    cases = real_cases()
    if name in BY_NAME:
        name = next(iter(BY_NAME[name].real))
    if name not in cases:
        raise KeyError(f"unknown real case {name!r} (known: {', '.join(cases)})")
    return cases[name]


def _make(arch: Arch, cls: str, tiny: bool, device: str | torch.device, seed: int) -> nn.Module:
    config = arch.config(tiny)
    torch.manual_seed(seed)
    with torch.device(device):
        return getattr(transformers, cls)(config)


def parameter_count(name: str, size: str = REAL) -> int:
    """Parameters of the inference model of architecture `name` at `size` (built on the meta device: no memory)."""
    arch = BY_NAME[name]
    return sum(p.numel() for p in _make(arch, arch.model_class, size == TINY, "meta", 0).parameters())


def build(name: str, size: str = TINY, device: str | torch.device = "cpu", seed: int = 0) -> Built:
    """The model `name` ("bert", or a real case such as "gpt2-4x1024-bf16") at `size`, in eval mode,
    with its example inputs, on `device`, in the size's dtype."""
    arch, shape = _arch_and_shape(name, size)
    tiny = size == TINY
    hf = _make(arch, arch.model_class, tiny, device, seed).to(shape.dtype).eval()
    inputs = arch.inputs(hf.config, shape, torch.Generator().manual_seed(seed + 1))
    names = tuple(inputs)
    model = Outputs(hf, names, arch.outputs).eval()
    tensors = tuple(t.to(device) for t in inputs.values())
    case = name if not tiny else arch.name
    return Built(case, size, model, tensors, names, shape.dtype, None if tiny else REAL_TOLERANCE[shape.dtype])


def causal_lm(name: str, size: str = TINY, device: str | torch.device = "cpu", seed: int = 0) -> nn.Module:
    """The transformers model of decoder architecture `name` with its LM head (the class the
    suite runs, e.g. GPT2LMHeadModel, LlamaForCausalLM: what `generate` needs) at `size`, in eval
    mode and the size's dtype: what benchmarks/decode.py runs."""
    arch, shape = _arch_and_shape(name, size)
    if arch.family != "decoder":
        decoders = ", ".join(a.name for a in ARCHS if a.family == "decoder")
        raise KeyError(f"{name!r} is not a decoder-only architecture (those: {decoders})")
    return _make(arch, arch.model_class, size == TINY, device, seed).to(shape.dtype).eval()


def build_training(name: str, device: str | torch.device = "cpu", seed: int = 0, size: str = TINY) -> Built:
    """The model `name` in train mode with its training head; `model(*inputs)` is the loss.
    Tiny: the tiny config and shape. Real: the published config at the main real case's shape,
    in fp32 (the weights a mixed-precision step keeps; the caller adds autocast)."""
    arch = BY_NAME[name]
    if arch.train_class is None:
        raise KeyError(f"{name!r} has no training step (those with one: {', '.join(TRAINING)})")
    tiny = size == TINY
    shape = arch.tiny if tiny else replace(next(iter(arch.real.values())), dtype=torch.float32)
    hf = _make(arch, arch.train_class, tiny, device, seed).train()
    for module in hf.modules():  # the published configs' dropout (T5's 0.1): random masks no
        if isinstance(module, nn.Dropout):  # two backends draw alike, so no gradient would compare
            module.p = 0.0
    g = torch.Generator().manual_seed(seed + 1)
    inputs = arch.inputs(hf.config, shape, g)
    inputs["labels"] = arch.labels(hf.config, shape, g)
    names = tuple(inputs)
    model = Outputs(hf, names, ("loss",)).train()
    return Built(name, size, model, tuple(t.to(device) for t in inputs.values()), names, torch.float32, None)


if __name__ == "__main__":
    for a in ARCHS:
        real = ", ".join(f"{case} {s.batch}x{s.length or ''}{'/' + str(s.target_length) if s.target_length else ''} "
                         f"{str(s.dtype).removeprefix('torch.')}" for case, s in a.real.items())
        print(f"{a.name:10} {a.family:16} {a.model_class:40} real: {a.what}: {real}"
              f"{'  (+ training step)' if a.train_class else ''}")
