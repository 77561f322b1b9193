"""Example inputs of the architectures `hf_sweep_archs.py` lists, by their inputs kind: 2 x 8
tokens with a padding mask, 32 x 32 images, waveforms, time series, and so on (small enough for
Triton's interpreter)."""

from __future__ import annotations

import torch

from hf_sweep_archs import IMG, B, T


def padded_mask():
    mask = torch.ones(B, T, dtype=torch.long)
    mask[-1, T - T // 4:] = 0
    return mask


def make_inputs(kind, config, g):
    def ids(vocab=128, n=T):
        return torch.randint(3, vocab, (B, n), generator=g)
    if kind in ("lm", "text"):
        return {"input_ids": ids(config.vocab_size), "attention_mask": padded_mask()}
    if kind == "seq2seq":
        return {"input_ids": ids(config.vocab_size), "attention_mask": padded_mask(),
                "decoder_input_ids": ids(config.vocab_size)}
    if kind == "image":
        return {"pixel_values": torch.randn(B, 3, IMG, IMG, generator=g)}
    if kind == "text+image":
        # CLIP's text model pools at the eos token (argmax of the ids when eos_token_id == 2): ids are 3+
        return {"input_ids": ids(config.text_config.vocab_size), "attention_mask": padded_mask(),
                "pixel_values": torch.randn(B, 3, IMG, IMG, generator=g)}
    if kind == "image+noise":  # ViTMAE shuffles patches by random noise: pass it
        return {"pixel_values": torch.randn(B, 3, IMG, IMG, generator=g),
                "noise": torch.rand(B, (IMG // config.patch_size) ** 2, generator=g)}
    if kind == "ids":
        return {"input_ids": ids(config.vocab_size)}
    if kind == "ast":
        return {"input_values": torch.randn(B, config.max_length, config.num_mel_bins, generator=g)}
    if kind == "speech2text":
        return {"input_features": torch.randn(B, 32, config.input_feat_per_channel, generator=g),
                "attention_mask": torch.ones(B, 32, dtype=torch.long), "decoder_input_ids": ids(config.vocab_size)}
    if kind == "video":
        return {"pixel_values": torch.randn(B, config.num_frames, 3, config.image_size, config.image_size, generator=g)}
    if kind == "audio":
        return {"input_values": torch.randn(B, 400, generator=g)}
    if kind == "chars":  # CANINE: unicode code points (no vocabulary), hashed into buckets
        return {"input_ids": ids(), "attention_mask": padded_mask()}
    if kind == "audio-features":  # Wav2Vec2-BERT: 16 frames of features, the last sample's last 4 padded
        mask = torch.ones(B, 16, dtype=torch.long)
        mask[-1, -4:] = 0
        return {"input_features": torch.randn(B, 16, config.feature_projection_input_dim, generator=g),
                "attention_mask": mask}
    if kind == "codec":  # neural audio codecs: a mono waveform, (batch, channels, samples)
        return {"input_values": torch.randn(B, 1, 64, generator=g)}
    if kind == "audio-seq2seq":  # Moonshine: a raw waveform (1600 samples: 2 encoder frames) and decoder tokens
        return {"input_values": torch.randn(B, 1600, generator=g), "decoder_input_ids": ids(config.vocab_size)}
    if kind == "siglip2":  # NaFlex: flattened patches, their mask and each image's patch grid (4 x 4)
        n = config.num_patches
        mask = torch.ones(B, n, dtype=torch.long)
        return {"pixel_values": torch.randn(B, n, 3 * config.patch_size ** 2, generator=g),
                "pixel_attention_mask": mask, "spatial_shapes": torch.tensor([[4, 4]] * B)}
    if kind == "pixtral":  # images of their own sizes: both 32 x 32
        return {"pixel_values": torch.randn(B, 3, IMG, IMG, generator=g), "image_sizes": torch.tensor([[IMG, IMG]] * B)}
    if kind == "video-vjepa2":
        return {"pixel_values_videos": torch.randn(B, config.frames_per_clip, 3, config.crop_size, config.crop_size,
                                                   generator=g)}
    if kind == "past-values":  # PatchTST / PatchTSMixer: (batch, context, channels)
        return {"past_values": torch.randn(B, config.context_length, config.num_input_channels, generator=g)}
    if kind == "time-series":  # Informer / Autoformer: the context plus the largest lag, one time feature
        n = config.context_length + max(config.lags_sequence)
        return {"past_values": torch.randn(B, n, generator=g), "past_time_features": torch.randn(B, n, 1, generator=g),
                "past_observed_mask": torch.ones(B, n), "future_values": torch.randn(B, config.prediction_length,
                                                                                  generator=g),
                "future_time_features": torch.randn(B, config.prediction_length, 1, generator=g)}
    if kind == "timesfm":  # TimesFM: one context series per row
        return {"past_values": torch.randn(B, config.context_length, generator=g)}
    if kind == "mel":  # Parakeet / LASR: 32 frames of log-mel features, the last sample's last 8 padded
        mask = torch.ones(B, 32, dtype=torch.long)
        mask[-1, -8:] = 0
        return {"input_features": torch.randn(B, 32, config.encoder_config.num_mel_bins, generator=g),
                "attention_mask": mask}
    if kind == "audio-seq2seq-streaming":  # Moonshine streaming: 16 frames of 5 ms at 16 kHz, and decoder tokens
        return {"input_values": torch.randn(B, 16 * 80, generator=g), "decoder_input_ids": ids(config.vocab_size)}
    if kind == "univnet":  # a vocoder: 8 frames of mel features and its noise
        return {"input_features": torch.randn(B, 8, config.num_mel_bins, generator=g),
                "noise_sequence": torch.randn(B, 8, config.model_in_channels, generator=g)}
    raise ValueError(kind)
