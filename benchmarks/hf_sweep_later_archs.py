"""The breadth sweep's fourth and fifth batches (session 46): `FOURTH` (decoders and encoders no
earlier batch had) and `FIFTH` (vision, detection, speech and time-series models), in the form of
`hf_sweep_archs.ARCHS`; and `REINIT`, the fifth batch's models whose outputs need re-initialized
weights to be judged."""

from __future__ import annotations

from hf_sweep_configs import BERT_LIKE, IMG, LLAMA_LIKE, SLIDING_FULL

# ---- a fourth batch, session 46
FOURTH = {
    # decoders
    "olmo3": ("Olmo3Config", dict(LLAMA_LIKE, pad_token_id=0, sliding_window=4, layer_types=SLIDING_FULL),
              "Olmo3ForCausalLM", "lm"),
    "glm": ("GlmConfig", dict(LLAMA_LIKE, head_dim=8, pad_token_id=0), "GlmForCausalLM", "lm"),
    "glm4_moe": ("Glm4MoeConfig", dict(LLAMA_LIKE, moe_intermediate_size=32, n_shared_experts=1, n_routed_experts=4,
                                       num_experts_per_tok=2, first_k_dense_replace=1, use_qk_norm=True),
                 "Glm4MoeForCausalLM", "lm"),
    "ernie4_5": ("Ernie4_5Config", dict(LLAMA_LIKE, head_dim=8), "Ernie4_5ForCausalLM", "lm"),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", dict(LLAMA_LIKE, moe_intermediate_size=32, moe_k=2, moe_num_experts=4,
                                                moe_num_shared_experts=1, moe_layer_start_index=1),
                     "Ernie4_5_MoeForCausalLM", "lm"),
    "hunyuan_v1_dense": ("HunYuanDenseV1Config", dict(LLAMA_LIKE, head_dim=8), "HunYuanDenseV1ForCausalLM", "lm"),
    "hunyuan_v1_moe": ("HunYuanMoEV1Config", dict(LLAMA_LIKE, head_dim=8, num_experts=4, moe_topk=2),
                       "HunYuanMoEV1ForCausalLM", "lm"),
    "seed_oss": ("SeedOssConfig", dict(LLAMA_LIKE, head_dim=8, attention_dropout=0.0, residual_dropout=0.0),
                 "SeedOssForCausalLM", "lm"),
    "dots1": ("Dots1Config", dict(LLAMA_LIKE, moe_intermediate_size=32, n_shared_experts=1, n_routed_experts=4,
                                  num_experts_per_tok=2, first_k_dense_replace=1, sliding_window=4,
                                  layer_types=SLIDING_FULL), "Dots1ForCausalLM", "lm"),
    "helium": ("HeliumConfig", dict(LLAMA_LIKE, head_dim=8), "HeliumForCausalLM", "lm"),
    "apertus": ("ApertusConfig", dict(LLAMA_LIKE), "ApertusForCausalLM", "lm"),  # xIELU activation
    "arcee": ("ArceeConfig", dict(LLAMA_LIKE), "ArceeForCausalLM", "lm"),  # relu^2 MLP
    "ministral": ("MinistralConfig", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, layer_types=SLIDING_FULL),
                  "MinistralForCausalLM", "lm"),
    "vaultgemma": ("VaultGemmaConfig", dict(LLAMA_LIKE, head_dim=8, query_pre_attn_scalar=8, sliding_window=4,
                                            layer_types=SLIDING_FULL), "VaultGemmaForCausalLM", "lm"),
    "minicpm3": ("MiniCPM3Config", dict(LLAMA_LIKE, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=16,
                                        qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=8, dim_model_base=32),
                 "MiniCPM3ForCausalLM", "lm"),
    "granitemoeshared": ("GraniteMoeSharedConfig", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2,
                                                        shared_intermediate_size=32),
                         "GraniteMoeSharedForCausalLM", "lm"),
    "cohere2_moe": ("Cohere2MoeConfig", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, layer_types=SLIDING_FULL,
                                             num_experts=4, num_experts_per_tok=2, num_shared_experts=1),
                    "Cohere2MoeForCausalLM", "lm"),
    "lfm2_moe": ("Lfm2MoeConfig", dict(LLAMA_LIKE, moe_intermediate_size=32, num_dense_layers=1, num_experts=4,
                                       num_experts_per_tok=2, layer_types=["conv", "full_attention"]),
                 "Lfm2MoeForCausalLM", "lm"),
    "nemotron_h": ("NemotronHConfig", dict(vocab_size=128, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                           head_dim=8, intermediate_size=64, max_position_embeddings=64,
                                           layers_block_type=["linear_attention", "full_attention", "moe"],
                                           ssm_state_size=8, mamba_num_heads=8, mamba_head_dim=8, n_groups=1,
                                           chunk_size=4, n_routed_experts=4, num_experts_per_tok=2,
                                           moe_intermediate_size=32, moe_shared_expert_intermediate_size=32,
                                           use_mamba_kernels=False),
                   "NemotronHForCausalLM", "lm"),
    # one transformer block shared by the hybrid layers: two of them (the weight tying needs a second)
    "zamba": ("ZambaConfig", dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                                  layers_block_type=["mamba", "hybrid", "hybrid"], n_mamba_heads=2, mamba_d_state=8,
                                  use_mamba_kernels=False), "ZambaForCausalLM", "lm"),
    "granitemoehybrid": ("GraniteMoeHybridConfig", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2,
                                                        shared_intermediate_size=32, layer_types=["mamba", "attention"],
                                                        mamba_n_heads=8, mamba_d_state=8, mamba_d_head=8,
                                                        mamba_chunk_size=4),
                         "GraniteMoeHybridForCausalLM", "lm"),
    "modernbert-decoder": ("ModernBertDecoderConfig", dict(BERT_LIKE, local_attention=4, pad_token_id=0, eos_token_id=2,
                                                           bos_token_id=1, cls_token_id=1, sep_token_id=2,
                                                           layer_types=SLIDING_FULL),
                           "ModernBertDecoderForCausalLM", "lm"),
    # the recurrent state's cache rounds the q/k and v widths up to 64: make them 64 (2 x 32)
    "xlstm": ("xLSTMConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_heads=2, chunk_size=4,
                                  qk_dim_factor=2.0, v_dim_factor=2.0, ffn_round_up_to_multiple_of=16,
                                  autocast_kernel_dtype="float32"),
              "xLSTMForCausalLM", "lm"),
    # encoders
    "eurobert": ("EuroBertConfig", dict(LLAMA_LIKE, pad_token_id=0, bos_token_id=1, eos_token_id=2, mask_token_id=2),
                 "EuroBertModel", "text"),
    "nomic_bert": ("NomicBertConfig", dict(BERT_LIKE), "NomicBertModel", "text"),
    "roberta-prelayernorm": ("RobertaPreLayerNormConfig", dict(BERT_LIKE), "RobertaPreLayerNormModel", "text"),
    "xmod": ("XmodConfig", dict(BERT_LIKE, languages=["en_XX", "de_DE"], default_language="en_XX"),
             "XmodModel", "text"),
}


# ---- a fifth batch, session 46: vision, detection, audio, time series
NO_DROP = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
# RT-DETR's detectors on a tiny transformers ResNet: stages 2-4 at strides 8, 16, 32 (4 x 4, 2 x 2, 1 x 1 features);
# two decoder layers (the box heads of layers 2+ are tied to the first's: one layer has none to tie)
RT_DETR_LIKE = dict(backbone_config=dict(model_type="resnet", embedding_size=8, hidden_sizes=[8, 16, 16, 16],
                                         depths=[1, 1, 1, 1], layer_type="basic",
                                         out_features=["stage2", "stage3", "stage4"]),
                    encoder_in_channels=[16, 16, 16], encoder_hidden_dim=16, encoder_ffn_dim=32,
                    encoder_attention_heads=2, d_model=16, decoder_in_channels=[16, 16, 16], decoder_ffn_dim=32,
                    decoder_layers=2, decoder_attention_heads=2, num_queries=4, num_denoising=0, num_labels=10,
                    **NO_DROP)
TS_LIKE = dict(prediction_length=4, context_length=8, lags_sequence=[1, 2], num_time_features=1, d_model=16,
               encoder_layers=1, decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32, encoder_layerdrop=0.0,
               decoder_layerdrop=0.0, **NO_DROP)
# the CTC speech encoders' (Parakeet's, LASR's): one conformer layer over 16 mel bins
CTC_ENCODER = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, conv_kernel_size=3,
                   subsampling_conv_channels=8, num_mel_bins=16, layerdrop=0.0, max_position_embeddings=64, **NO_DROP)
FIFTH = {
    # vision backbones
    # pos_embed_rescale off: in training it rescales the RoPE coordinates by a random draw (like dropout)
    "dinov3_vit": ("DINOv3ViTConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=2, num_register_tokens=2,
                                           pos_embed_rescale=None),
                   "DINOv3ViTModel", "image"),
    "dinov3_convnext": ("DINOv3ConvNextConfig", dict(image_size=IMG, hidden_sizes=[8, 16], depths=[1, 1]),
                        "DINOv3ConvNextModel", "image"),
    "aimv2_vision": ("Aimv2VisionConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, intermediate_size=64,
                                               num_hidden_layers=2, num_attention_heads=2),
                     "Aimv2VisionModel", "image"),
    "siglip2_vision": ("Siglip2VisionConfig", dict(patch_size=8, hidden_size=32, intermediate_size=64,
                                                   num_hidden_layers=2, num_attention_heads=2, num_patches=16),
                       "Siglip2VisionModel", "siglip2"),
    "mlcd_vision": ("MLCDVisionConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=2),
                    "MLCDVisionModel", "image"),
    "pixtral_vision": ("PixtralVisionConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, intermediate_size=64,
                                                   num_hidden_layers=2, num_attention_heads=2, head_dim=16),
                       "PixtralVisionModel", "pixtral"),
    "pvt": ("PvtConfig", dict(image_size=IMG, num_encoder_blocks=2, depths=[1, 1], sequence_reduction_ratios=[2, 1],
                              hidden_sizes=[16, 32], patch_sizes=[4, 2], strides=[4, 2], num_attention_heads=[1, 2],
                              mlp_ratios=[2, 2], num_labels=10), "PvtForImageClassification", "image"),
    "sam2_vision": ("Sam2VisionConfig", dict(backbone_config=dict(model_type="sam2_hiera_det_model", hidden_size=8,
                                                                  image_size=[IMG, IMG], blocks_per_stage=[1, 1, 2, 1],
                                                                  embed_dim_per_stage=[8, 16, 32, 64],
                                                                  num_attention_heads_per_stage=[1, 1, 2, 2],
                                                                  window_size_per_stage=[4, 2, 2, 1],
                                                                  global_attention_blocks=[3],
                                                                  window_positional_embedding_background_size=[2, 2]),
                                             backbone_channel_list=[64, 32, 16, 8],
                                             backbone_feature_sizes=[[8, 8], [4, 4], [2, 2]], fpn_hidden_size=16),
                    "Sam2VisionModel", "image"),
    "vjepa2": ("VJEPA2Config", dict(patch_size=8, crop_size=16, frames_per_clip=4, tubelet_size=2, hidden_size=32,
                                    num_attention_heads=2, num_hidden_layers=1, mlp_ratio=2.0, num_pooler_layers=1,
                                    pred_hidden_size=32, pred_num_attention_heads=2, pred_num_hidden_layers=1),
               "VJEPA2Model", "video-vjepa2"),
    # detectors
    "rt_detr_v2": ("RTDetrV2Config", dict(RT_DETR_LIKE), "RTDetrV2ForObjectDetection", "image"),
    "d_fine": ("DFineConfig", dict(RT_DETR_LIKE), "DFineForObjectDetection", "image"),
    "deimv2": ("Deimv2Config", dict(RT_DETR_LIKE), "Deimv2ForObjectDetection", "image"),
    # a plain ViT backbone (window attention in its first block), one projector level
    "lw_detr": ("LwDetrConfig", dict(backbone_config=dict(model_type="lw_detr_vit", image_size=IMG, pretrain_image_size=IMG,
                                                          patch_size=8, hidden_size=32, num_hidden_layers=2,
                                                          num_attention_heads=2, mlp_ratio=2, window_block_indices=[0],
                                                          num_windows=4, out_indices=[1, 2]),
                                     projector_scale_factors=[1.0], d_model=32, decoder_layers=2, decoder_ffn_dim=64,
                                     decoder_self_attention_heads=2, decoder_cross_attention_heads=2, num_queries=4,
                                     group_detr=2, c2f_num_blocks=1, num_labels=10),
                "LwDetrForObjectDetection", "image"),
    # time series
    "patchtst": ("PatchTSTConfig", dict(num_input_channels=2, context_length=16, patch_length=4, patch_stride=4,
                                        num_hidden_layers=1, d_model=16, num_attention_heads=2, ffn_dim=32,
                                        prediction_length=4), "PatchTSTForPrediction", "past-values"),
    "patchtsmixer": ("PatchTSMixerConfig", dict(num_input_channels=2, context_length=16, patch_length=4,
                                                patch_stride=4, d_model=16, num_layers=1, dropout=0.0,
                                                head_dropout=0.0, prediction_length=4, self_attn=True),
                     "PatchTSMixerForPrediction", "past-values"),
    "informer": ("InformerConfig", dict(TS_LIKE), "InformerForPrediction", "time-series"),
    "autoformer": ("AutoformerConfig", dict(TS_LIKE, label_length=4, moving_average=3), "AutoformerForPrediction",
                   "time-series"),
    "timesfm": ("TimesFmConfig", dict(patch_length=4, context_length=16, horizon_length=4, num_hidden_layers=1,
                                      hidden_size=32, intermediate_size=64, head_dim=16, num_attention_heads=2),
                "TimesFmModelForPrediction", "timesfm"),
    # speech / audio
    "parakeet_ctc": ("ParakeetCTCConfig", dict(vocab_size=32, pad_token_id=31, encoder_config=dict(CTC_ENCODER)),
                     "ParakeetForCTC", "mel"),
    "lasr_ctc": ("LasrCTCConfig", dict(vocab_size=32, encoder_config=dict(CTC_ENCODER)), "LasrForCTC", "mel"),
    "moonshine_streaming": ("MoonshineStreamingConfig", dict(vocab_size=128, hidden_size=32, intermediate_size=64,
                                                             num_hidden_layers=1, num_attention_heads=2,
                                                             num_key_value_heads=2, head_dim=16,
                                                             max_position_embeddings=64,
                                                             encoder_config=dict(hidden_size=32, intermediate_size=64,
                                                                                 num_hidden_layers=2,
                                                                                 num_attention_heads=2,
                                                                                 num_key_value_heads=2, head_dim=16,
                                                                                 max_position_embeddings=64,
                                                                                 sliding_windows=[[4, 1], [4, 0]])),
                            "MoonshineStreamingForConditionalGeneration", "audio-seq2seq-streaming"),
    "univnet": ("UnivNetConfig", dict(model_in_channels=8, model_hidden_channels=8, num_mel_bins=16,
                                      resblock_kernel_sizes=[3, 3], resblock_stride_sizes=[2, 2],
                                      resblock_dilation_sizes=[[1, 3], [1, 3]], kernel_predictor_num_blocks=1,
                                      kernel_predictor_hidden_channels=8),
                "UnivNetModel", "univnet"),
}

REINIT = ("parakeet_ctc", "univnet")  # logits ~1e-4, a waveform ~3e-4
