"""The architectures `hf_sweep.py` builds (transformers config class, its tiny kwargs, model
class, inputs kind) and their example inputs: 2 x 8 tokens with a padding mask, 32 x 32 images,
and so on. A first batch (`ARCHS` without `EXTRA`, `THIRD` and `FOURTH`), a second (`EXTRA`),
a third (`THIRD`) and a fourth (`FOURTH`)."""

from __future__ import annotations

import torch

B, T, IMG = 2, 8, 32

NO_DROP_BERT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
LLAMA_LIKE = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
# DeepSeek V2 / V3: multi-head latent attention and a routed MoE after one dense layer
DEEPSEEK_LIKE = dict(LLAMA_LIKE, num_key_value_heads=4, moe_intermediate_size=32, n_shared_experts=1, n_routed_experts=4,
                     kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=4, v_head_dim=8, qk_nope_head_dim=4, n_group=2,
                     topk_group=1, num_experts_per_tok=2, first_k_dense_replace=1)
BERT_LIKE = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=64, **NO_DROP_BERT)
BART_LIKE = dict(vocab_size=128, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                 dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                 pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
W2V_LIKE = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                conv_dim=[16, 16], conv_stride=[5, 2], conv_kernel=[10, 3],
                num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0,
                layerdrop=0.0, final_dropout=0.0, feat_proj_dropout=0.0)

# name -> (config class, kwargs, model class, inputs kind)
ARCHS = {
    # ---- decoder-only
    "mistral": ("MistralConfig", dict(LLAMA_LIKE, sliding_window=None), "MistralForCausalLM", "lm"),
    "mixtral": ("MixtralConfig", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
                "MixtralForCausalLM", "lm"),
    "gemma": ("GemmaConfig", dict(LLAMA_LIKE, head_dim=8), "GemmaForCausalLM", "lm"),
    "gemma2": ("Gemma2Config", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, query_pre_attn_scalar=8),
               "Gemma2ForCausalLM", "lm"),
    "gemma3_text": ("Gemma3TextConfig", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
                                             layer_types=["sliding_attention", "full_attention"]),
                    "Gemma3ForCausalLM", "lm"),
    "qwen3": ("Qwen3Config", dict(LLAMA_LIKE, head_dim=8), "Qwen3ForCausalLM", "lm"),
    "qwen3_moe": ("Qwen3MoeConfig", dict(LLAMA_LIKE, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                         moe_intermediate_size=32, decoder_sparse_step=1),
                  "Qwen3MoeForCausalLM", "lm"),
    "falcon": ("FalconConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    hidden_dropout=0.0, attention_dropout=0.0, max_position_embeddings=64),
               "FalconForCausalLM", "lm"),
    "bloom": ("BloomConfig", dict(vocab_size=128, hidden_size=32, n_layer=2, n_head=4, hidden_dropout=0.0,
                                  attention_dropout=0.0), "BloomForCausalLM", "lm"),
    "gptj": ("GPTJConfig", dict(vocab_size=128, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64,
                                n_inner=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
             "GPTJForCausalLM", "lm"),
    "gpt_neo": ("GPTNeoConfig", dict(vocab_size=128, hidden_size=32, num_layers=2, num_heads=4,
                                     attention_types=[[["global", "local"], 1]], window_size=4,
                                     intermediate_size=64, max_position_embeddings=64, resid_dropout=0.0,
                                     embed_dropout=0.0, attention_dropout=0.0),
                "GPTNeoForCausalLM", "lm"),
    "gpt_bigcode": ("GPTBigCodeConfig", dict(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                             n_inner=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                             multi_query=True),
                    "GPTBigCodeForCausalLM", "lm"),
    "codegen": ("CodeGenConfig", dict(vocab_size=128, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64,
                                      n_ctx=64, n_inner=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
                "CodeGenForCausalLM", "lm"),
    "mpt": ("MptConfig", dict(vocab_size=128, d_model=32, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=64,
                              resid_pdrop=0.0, emb_pdrop=0.0), "MptForCausalLM", "lm"),
    "stablelm": ("StableLmConfig", dict(LLAMA_LIKE, partial_rotary_factor=0.25), "StableLmForCausalLM", "lm"),
    "olmo": ("OlmoConfig", dict(LLAMA_LIKE), "OlmoForCausalLM", "lm"),
    "olmo2": ("Olmo2Config", dict(LLAMA_LIKE), "Olmo2ForCausalLM", "lm"),
    "granite": ("GraniteConfig", dict(LLAMA_LIKE), "GraniteForCausalLM", "lm"),
    "phi3": ("Phi3Config", dict(LLAMA_LIKE, pad_token_id=0), "Phi3ForCausalLM", "lm"),
    "cohere": ("CohereConfig", dict(LLAMA_LIKE), "CohereForCausalLM", "lm"),
    "starcoder2": ("Starcoder2Config", dict(LLAMA_LIKE, sliding_window=None, residual_dropout=0.0,
                                            embedding_dropout=0.0), "Starcoder2ForCausalLM", "lm"),
    # ---- encoders
    "electra": ("ElectraConfig", dict(BERT_LIKE, embedding_size=16), "ElectraForMaskedLM", "text"),
    "albert": ("AlbertConfig", dict(BERT_LIKE, embedding_size=16), "AlbertForMaskedLM", "text"),
    "deberta": ("DebertaConfig", dict(BERT_LIKE, relative_attention=True, max_relative_positions=16,
                                      pos_att_type=["c2p", "p2c"]), "DebertaForMaskedLM", "text"),
    "deberta-v2": ("DebertaV2Config", dict(BERT_LIKE, relative_attention=True, position_buckets=8,
                                           max_relative_positions=16, pos_att_type=["c2p", "p2c"],
                                           norm_rel_ebd="layer_norm", share_att_key=True),
                   "DebertaV2ForMaskedLM", "text"),
    "xlm-roberta": ("XLMRobertaConfig", dict(BERT_LIKE, type_vocab_size=1), "XLMRobertaForMaskedLM", "text"),
    "mobilebert": ("MobileBertConfig", dict(BERT_LIKE, embedding_size=16, intra_bottleneck_size=16,
                                            true_hidden_size=16, num_feedforward_networks=2),
                   "MobileBertForMaskedLM", "text"),
    "mpnet": ("MPNetConfig", dict(BERT_LIKE), "MPNetForMaskedLM", "text"),
    # ---- encoder-decoders
    "mbart": ("MBartConfig", dict(BART_LIKE), "MBartForConditionalGeneration", "seq2seq"),
    "pegasus": ("PegasusConfig", dict(BART_LIKE, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0),
                "PegasusForConditionalGeneration", "seq2seq"),
    "marian": ("MarianConfig", dict(BART_LIKE, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                                    decoder_vocab_size=128), "MarianMTModel", "seq2seq"),
    "mt5": ("MT5Config", dict(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                              relative_attention_num_buckets=8, dropout_rate=0.0, decoder_start_token_id=0),
            "MT5ForConditionalGeneration", "seq2seq"),
    "blenderbot": ("BlenderbotConfig", dict(BART_LIKE), "BlenderbotForConditionalGeneration", "seq2seq"),
    # ---- vision
    "beit": ("BeitConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=64, num_labels=10,
                                use_relative_position_bias=True, **NO_DROP_BERT),
             "BeitForImageClassification", "image"),
    "dinov2": ("Dinov2Config", dict(image_size=IMG, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, mlp_ratio=2, num_labels=10, **NO_DROP_BERT),
               "Dinov2ForImageClassification", "image"),
    "segformer": ("SegformerConfig", dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                                          patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
                                          mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=10,
                                          drop_path_rate=0.0, classifier_dropout_prob=0.0, **NO_DROP_BERT),
                  "SegformerForImageClassification", "image"),
    "mobilevit": ("MobileViTConfig", dict(image_size=IMG, patch_size=2, hidden_sizes=[16, 24, 32],
                                          neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 48], num_attention_heads=2,
                                          num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                          classifier_dropout_prob=0.0),
                  "MobileViTForImageClassification", "image"),
    "regnet": ("RegNetConfig", dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8,
                                    layer_type="y", num_labels=10), "RegNetForImageClassification", "image"),
    "convnextv2": ("ConvNextV2Config", dict(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10,
                                            image_size=IMG), "ConvNextV2ForImageClassification", "image"),
    "levit": ("LevitConfig", dict(image_size=IMG, hidden_sizes=[32, 48, 64], num_attention_heads=[2, 3, 4], depths=[1, 1, 1],
                                  key_dim=[8, 8, 8], drop_path_rate=0, mlp_ratio=[2, 2, 2], attention_ratio=[2, 2, 2],
                                  num_labels=10), "LevitForImageClassification", "image"),
    # ---- multimodal
    "clip": ("CLIPConfig", dict(text_config=dict(vocab_size=128, hidden_size=32, intermediate_size=64,
                                                 num_hidden_layers=1, num_attention_heads=2,
                                                 max_position_embeddings=64, projection_dim=16),
                                vision_config=dict(image_size=IMG, patch_size=8, hidden_size=32, intermediate_size=64,
                                                   num_hidden_layers=1, num_attention_heads=2, projection_dim=16),
                                projection_dim=16), "CLIPModel", "text+image"),
    "siglip": ("SiglipConfig", dict(text_config=dict(vocab_size=128, hidden_size=32, intermediate_size=64,
                                                     num_hidden_layers=1, num_attention_heads=2,
                                                     max_position_embeddings=64),
                                    vision_config=dict(image_size=IMG, patch_size=8, hidden_size=32,
                                                       intermediate_size=64, num_hidden_layers=1,
                                                       num_attention_heads=2)), "SiglipModel", "text+image"),
    # ---- speech
    "data2vec-audio": ("Data2VecAudioConfig", dict(W2V_LIKE, num_conv_pos_embeddings=4, conv_pos_kernel_size=4,
                                                   num_conv_pos_embedding_groups=2),
                       "Data2VecAudioModel", "audio"),
    "sew": ("SEWConfig", dict(W2V_LIKE, squeeze_factor=2), "SEWModel", "audio"),
}


# tiny models whose HF init leaves every activation ~0 (a comparison against eager would be vacuous)
REINIT = ("mobilevit", "levit", "mobilenet_v2", "dpt", "efficientnet",
          "mobilenet_v1", "mobilevitv2", "swiftformer", "hgnet_v2", "textnet")  # these five: the third batch


# ---- extra architectures (a second batch, beyond the brief's list)
T5_LIKE = dict(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
               relative_attention_num_buckets=8, dropout_rate=0.0, decoder_start_token_id=0)
EXTRA = {
    # decoders
    "modernbert": ("ModernBertConfig", dict(BERT_LIKE, local_attention=4, pad_token_id=0, eos_token_id=2, bos_token_id=1,
                                            cls_token_id=1, sep_token_id=2, global_attn_every_n_layers=2),
                   "ModernBertForMaskedLM", "text"),
    "gpt_oss": ("GptOssConfig", dict(LLAMA_LIKE, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                                     layer_types=["sliding_attention", "full_attention"]), "GptOssForCausalLM", "lm"),
    "llama4_text": ("Llama4TextConfig", dict(LLAMA_LIKE, intermediate_size_mlp=64, head_dim=8, num_local_experts=4,
                                             num_experts_per_tok=1, attention_chunk_size=4, no_rope_layer_interval=2),
                    "Llama4ForCausalLM", "lm"),
    "qwen2_moe": ("Qwen2MoeConfig", dict(LLAMA_LIKE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=32), "Qwen2MoeForCausalLM", "lm"),
    "qwen3_next": ("Qwen3NextConfig", dict(LLAMA_LIKE, head_dim=8, linear_key_head_dim=8, linear_value_head_dim=8,
                                           linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4,
                                           num_experts_per_tok=2, moe_intermediate_size=32,
                                           shared_expert_intermediate_size=32,
                                           layer_types=["linear_attention", "full_attention"]),
                   "Qwen3NextForCausalLM", "lm"),
    # the same chunked gated-delta rule (a triangular solve per chunk) without experts
    "qwen3_5_text": ("Qwen3_5TextConfig", dict(LLAMA_LIKE, head_dim=8, linear_key_head_dim=8, linear_value_head_dim=8,
                                               linear_num_key_heads=2, linear_num_value_heads=4,
                                               layer_types=["linear_attention", "full_attention"]),
                     "Qwen3_5ForCausalLM", "lm"),
    "olmo_hybrid": ("OlmoHybridConfig", dict(LLAMA_LIKE, pad_token_id=0, linear_key_head_dim=8, linear_value_head_dim=8,
                                             linear_num_key_heads=2, linear_num_value_heads=4,
                                             layer_types=["linear_attention", "full_attention"]),
                    "OlmoHybridForCausalLM", "lm"),
    "deepseek_v3": ("DeepseekV3Config", dict(DEEPSEEK_LIKE), "DeepseekV3ForCausalLM", "lm"),
    "olmoe": ("OlmoeConfig", dict(LLAMA_LIKE, num_experts=4, num_experts_per_tok=2, pad_token_id=0),
              "OlmoeForCausalLM", "lm"),
    "dbrx": ("DbrxConfig", dict(vocab_size=128, d_model=32, n_heads=4, n_layers=2, max_seq_len=64,
                                attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0), ffn_config=dict(ffn_hidden_size=64, moe_num_experts=4,
                                                                                moe_top_k=2)),
             "DbrxForCausalLM", "lm"),
    "granitemoe": ("GraniteMoeConfig", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2),
                   "GraniteMoeForCausalLM", "lm"),
    "phimoe": ("PhimoeConfig", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0),
               "PhimoeForCausalLM", "lm"),
    "mamba": ("MambaConfig", dict(vocab_size=128, hidden_size=32, state_size=8, num_hidden_layers=2),
              "MambaForCausalLM", "lm"),
    "mamba2": ("Mamba2Config", dict(vocab_size=128, hidden_size=32, state_size=8, num_hidden_layers=2, num_heads=8,
                                    head_dim=8, n_groups=1, chunk_size=4), "Mamba2ForCausalLM", "lm"),
    "falcon_mamba": ("FalconMambaConfig", dict(vocab_size=128, hidden_size=32, state_size=8, num_hidden_layers=2),
                     "FalconMambaForCausalLM", "lm"),
    "rwkv": ("RwkvConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, context_length=64,
                                attention_hidden_size=32, intermediate_size=64), "RwkvForCausalLM", "lm"),
    "recurrent_gemma": ("RecurrentGemmaConfig", dict(vocab_size=128, hidden_size=32, intermediate_size=64,
                                                     num_hidden_layers=3, num_attention_heads=4, lru_width=32,
                                                     attention_window_size=16, conv1d_width=4),
                        "RecurrentGemmaForCausalLM", "lm"),
    "jamba": ("JambaConfig", dict(LLAMA_LIKE, num_experts=4, num_experts_per_tok=2, expert_layer_period=2,
                                  expert_layer_offset=1, attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8,
                                  use_mamba_kernels=False), "JambaForCausalLM", "lm"),
    "bamba": ("BambaConfig", dict(LLAMA_LIKE, attn_layer_indices=[1], mamba_n_heads=8, mamba_d_head=8,
                                  mamba_d_state=8, mamba_chunk_size=4), "BambaForCausalLM", "lm"),
    "lfm2": ("Lfm2Config", dict(LLAMA_LIKE, layer_types=["conv", "full_attention"], block_multiple_of=16,
                                block_auto_adjust_ff_dim=False), "Lfm2ForCausalLM", "lm"),
    "nemotron": ("NemotronConfig", dict(LLAMA_LIKE), "NemotronForCausalLM", "lm"),
    "persimmon": ("PersimmonConfig", dict(LLAMA_LIKE), "PersimmonForCausalLM", "lm"),
    # encoders
    "bigbird": ("BigBirdConfig", dict(BERT_LIKE, attention_type="original_full"), "BigBirdForMaskedLM", "text"),
    "longformer": ("LongformerConfig", dict(BERT_LIKE, attention_window=4), "LongformerForMaskedLM", "text"),
    "funnel": ("FunnelConfig", dict(vocab_size=128, block_sizes=[1, 1], num_decoder_layers=1, d_model=32, n_head=2,
                                    d_head=16, d_inner=64, hidden_dropout=0.0, attention_dropout=0.0),
               "FunnelForMaskedLM", "text"),
    "xlnet": ("XLNetConfig", dict(vocab_size=128, d_model=32, n_layer=2, n_head=2, d_inner=64, dropout=0.0),
              "XLNetLMHeadModel", "text"),
    "fnet": ("FNetConfig", dict(BERT_LIKE), "FNetForMaskedLM", "ids"),
    "squeezebert": ("SqueezeBertConfig", dict(BERT_LIKE, embedding_size=32, q_groups=2, k_groups=2, v_groups=2,
                                              intermediate_groups=2, output_groups=2), "SqueezeBertForMaskedLM", "text"),
    "convbert": ("ConvBertConfig", dict(BERT_LIKE, embedding_size=32, conv_kernel_size=3), "ConvBertForMaskedLM", "text"),
    "roformer": ("RoFormerConfig", dict(BERT_LIKE), "RoFormerForMaskedLM", "text"),
    "esm": ("EsmConfig", dict(BERT_LIKE, pad_token_id=1, mask_token_id=2, position_embedding_type="rotary"),
            "EsmForMaskedLM", "text"),
    "nystromformer": ("NystromformerConfig", dict(BERT_LIKE, num_landmarks=4, segment_means_seq_len=8,
                                                  conv_kernel_size=3), "NystromformerForMaskedLM", "ids"),
    # encoder-decoders
    "led": ("LEDConfig", dict(BART_LIKE, max_encoder_position_embeddings=64, max_decoder_position_embeddings=64,
                              attention_window=4), "LEDForConditionalGeneration", "seq2seq"),
    "prophetnet": ("ProphetNetConfig", dict(vocab_size=128, hidden_size=32, encoder_ffn_dim=64, num_encoder_layers=1,
                                            num_encoder_attention_heads=2, decoder_ffn_dim=64, num_decoder_layers=1,
                                            num_decoder_attention_heads=2, max_position_embeddings=64, dropout=0.0,
                                            attention_dropout=0.0, activation_dropout=0.0, ngram=2, num_buckets=8),
                   "ProphetNetForConditionalGeneration", "seq2seq"),
    "longt5": ("LongT5Config", dict(T5_LIKE, local_radius=2, global_block_size=4, encoder_attention_type="transient-global"),
               "LongT5ForConditionalGeneration", "seq2seq"),
    "switch_transformers": ("SwitchTransformersConfig", dict(T5_LIKE, num_layers=2, num_sparse_encoder_layers=1,
                                                             num_decoder_layers=2, num_sparse_decoder_layers=1,
                                                             num_experts=4, expert_capacity=8, router_jitter_noise=0.0),
                            "SwitchTransformersForConditionalGeneration", "seq2seq"),
    "umt5": ("UMT5Config", dict(T5_LIKE), "UMT5ForConditionalGeneration", "seq2seq"),
    "m2m_100": ("M2M100Config", dict(BART_LIKE, encoder_layerdrop=0.0, decoder_layerdrop=0.0),
                "M2M100ForConditionalGeneration", "seq2seq"),
    "fsmt": ("FSMTConfig", dict(BART_LIKE, src_vocab_size=128, tgt_vocab_size=128, langs=["en", "de"]),
             "FSMTForConditionalGeneration", "seq2seq"),
    "plbart": ("PLBartConfig", dict(BART_LIKE), "PLBartForConditionalGeneration", "seq2seq"),
    "bigbird_pegasus": ("BigBirdPegasusConfig", dict(BART_LIKE, attention_type="original_full"),
                        "BigBirdPegasusForConditionalGeneration", "seq2seq"),
    # vision
    "swinv2": ("Swinv2Config", dict(image_size=IMG, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                                    window_size=4, drop_path_rate=0.0, num_labels=10),
               "Swinv2ForImageClassification", "image"),
    "cvt": ("CvtConfig", dict(embed_dim=[16, 32], num_heads=[1, 2], depth=[1, 2], patch_sizes=[7, 3], patch_stride=[4, 2],
                              patch_padding=[2, 1], mlp_ratio=[2.0, 2.0], attention_drop_rate=[0.0, 0.0],
                              drop_rate=[0.0, 0.0], drop_path_rate=[0.0, 0.0], qkv_bias=[True, True],
                              cls_token=[False, True], qkv_projection_method=["dw_bn", "dw_bn"], kernel_qkv=[3, 3],
                              padding_kv=[1, 1], stride_kv=[2, 2], padding_q=[1, 1], stride_q=[1, 1], num_labels=10),
            "CvtForImageClassification", "image"),
    "efficientnet": ("EfficientNetConfig", dict(image_size=IMG, width_coefficient=0.25, depth_coefficient=0.3,
                                                hidden_dim=320, dropout_rate=0.0, drop_connect_rate=0.0, num_labels=10),
                     "EfficientNetForImageClassification", "image"),
    "mobilenet_v2": ("MobileNetV2Config", dict(image_size=IMG, depth_multiplier=0.25, classifier_dropout_prob=0.0,
                                               num_labels=10), "MobileNetV2ForImageClassification", "image"),
    "poolformer": ("PoolFormerConfig", dict(depths=[1, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                                            padding=[2, 1], num_encoder_blocks=2, num_labels=10),
                   "PoolFormerForImageClassification", "image"),
    "focalnet": ("FocalNetConfig", dict(image_size=IMG, embed_dim=16, hidden_sizes=[32, 64], depths=[1, 1],
                                        focal_levels=[2, 2], focal_windows=[3, 3], drop_path_rate=0.0, num_labels=10),
                 "FocalNetForImageClassification", "image"),
    "pvt_v2": ("PvtV2Config", dict(image_size=IMG, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                   hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
                                   mlp_ratios=[2, 2], num_labels=10), "PvtV2ForImageClassification", "image"),
    "hiera": ("HieraConfig", dict(embed_dim=16, image_size=[IMG, IMG], patch_size=[3, 3], patch_stride=[2, 2],
                                  patch_padding=[1, 1], depths=[1, 1], num_heads=[1, 2], num_query_pool=1,
                                  query_stride=[2, 2], masked_unit_size=[4, 4], masked_unit_attention=[True, False],
                                  num_labels=10), "HieraForImageClassification", "image"),
    "vit_mae": ("ViTMAEConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64, decoder_num_attention_heads=2,
                                     decoder_hidden_size=32, decoder_num_hidden_layers=1, decoder_intermediate_size=64,
                                     mask_ratio=0.0), "ViTMAEModel", "image+noise"),
    "yolos": ("YolosConfig", dict(image_size=[IMG, IMG], patch_size=8, hidden_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=64, num_detection_tokens=4, num_labels=10),
              "YolosForObjectDetection", "image"),
    "bit": ("BitConfig", dict(embedding_size=8, hidden_sizes=[16, 32], depths=[1, 1], num_groups=4, num_labels=10),
            "BitForImageClassification", "image"),
    "data2vec-vision": ("Data2VecVisionConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=64, drop_path_rate=0.0,
                                                     use_relative_position_bias=True, num_labels=10),
                        "Data2VecVisionForImageClassification", "image"),
    "dpt": ("DPTConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                              intermediate_size=64, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 16, 32, 32],
                              fusion_hidden_size=16, head_in_index=-1), "DPTForDepthEstimation", "image"),
    # speech / audio / video
    "sew-d": ("SEWDConfig", dict(W2V_LIKE, squeeze_factor=2, position_buckets=8, max_position_embeddings=64),
              "SEWDModel", "audio"),
    "wavlm": ("WavLMConfig", dict(W2V_LIKE, num_buckets=16, max_bucket_distance=32), "WavLMModel", "audio"),
    "unispeech": ("UniSpeechConfig", dict(W2V_LIKE), "UniSpeechModel", "audio"),
    "ast": ("ASTConfig", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                              patch_size=8, frequency_stride=8, time_stride=8, max_length=32, num_mel_bins=16,
                              num_labels=10), "ASTForAudioClassification", "ast"),
    "speech_to_text": ("Speech2TextConfig", dict(vocab_size=128, encoder_layers=1, encoder_ffn_dim=64,
                                                 encoder_attention_heads=2, decoder_layers=1, decoder_ffn_dim=64,
                                                 decoder_attention_heads=2, d_model=32, dropout=0.0,
                                                 max_source_positions=64, max_target_positions=64, conv_channels=16,
                                                 input_feat_per_channel=8), "Speech2TextForConditionalGeneration",
                       "speech2text"),
    "videomae": ("VideoMAEConfig", dict(image_size=16, patch_size=8, num_frames=4, tubelet_size=2, hidden_size=32,
                                        num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, num_labels=10),
                 "VideoMAEForVideoClassification", "video"),
}
ARCHS.update(EXTRA)


# ---- a third batch, session 31
SLIDING_FULL = ["sliding_attention", "full_attention"]
# DETR's detectors on a tiny transformers ResNet (no timm, nothing downloaded): stride 8, 4 x 4 features
DETR_LIKE = dict(backbone_config=dict(model_type="resnet", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                      layer_type="basic", out_features=["stage2"]),
                 num_queries=4, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64, decoder_ffn_dim=64,
                 encoder_attention_heads=2, decoder_attention_heads=2, d_model=32, dropout=0.0, num_labels=10)
THIRD = {
    # decoders
    "xglm": ("XGLMConfig", dict(vocab_size=128, d_model=32, ffn_dim=64, num_layers=2, attention_heads=4,
                                max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0),
             "XGLMForCausalLM", "lm"),
    "biogpt": ("BioGptConfig", dict(BERT_LIKE), "BioGptForCausalLM", "lm"),
    "ctrl": ("CTRLConfig", dict(vocab_size=128, n_positions=64, n_embd=32, dff=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                                embd_pdrop=0.0), "CTRLLMHeadModel", "lm"),
    "glm4": ("Glm4Config", dict(LLAMA_LIKE, head_dim=8, pad_token_id=0), "Glm4ForCausalLM", "lm"),
    "cohere2": ("Cohere2Config", dict(LLAMA_LIKE, sliding_window=4, layer_types=SLIDING_FULL),
                "Cohere2ForCausalLM", "lm"),
    "deepseek_v2": ("DeepseekV2Config", dict(DEEPSEEK_LIKE), "DeepseekV2ForCausalLM", "lm"),
    "diffllama": ("DiffLlamaConfig", dict(LLAMA_LIKE), "DiffLlamaForCausalLM", "lm"),
    "exaone4": ("Exaone4Config", dict(LLAMA_LIKE, sliding_window=4, layer_types=SLIDING_FULL),
                "Exaone4ForCausalLM", "lm"),
    "smollm3": ("SmolLM3Config", dict(LLAMA_LIKE, pad_token_id=0, no_rope_layer_interval=2),
                "SmolLM3ForCausalLM", "lm"),
    "zamba2": ("Zamba2Config", dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, max_position_embeddings=64,
                                    layers_block_type=["mamba", "hybrid"], mamba_d_state=8, n_mamba_heads=8,
                                    chunk_size=4, adapter_rank=8, use_mamba_kernels=False),
               "Zamba2ForCausalLM", "lm"),
    "bitnet": ("BitNetConfig", dict(LLAMA_LIKE), "BitNetForCausalLM", "lm"),
    "falcon_h1": ("FalconH1Config", dict(LLAMA_LIKE, mamba_d_ssm=64, mamba_n_heads=8, mamba_d_head=8, mamba_d_state=8,
                                         mamba_chunk_size=4), "FalconH1ForCausalLM", "lm"),
    "minimax": ("MiniMaxConfig", dict(LLAMA_LIKE, head_dim=8, num_local_experts=4, num_experts_per_tok=2, block_size=4,
                                      layer_types=["linear_attention", "full_attention"]), "MiniMaxForCausalLM", "lm"),
    "jetmoe": ("JetMoeConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_key_value_heads=2,
                                    kv_channels=8, intermediate_size=64, max_position_embeddings=64,
                                    num_local_experts=4, num_experts_per_tok=2), "JetMoeForCausalLM", "lm"),
    "gemma3n_text": ("Gemma3nTextConfig", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, layer_types=SLIDING_FULL,
                                               vocab_size_per_layer_input=128, hidden_size_per_layer_input=8,
                                               altup_num_inputs=2, num_kv_shared_layers=0, laurel_rank=4,
                                               activation_sparsity_pattern=[0.0, 0.0]),
                     "Gemma3nForCausalLM", "lm"),
    # encoders
    "canine": ("CanineConfig", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                    max_position_embeddings=64, num_hash_functions=4, num_hash_buckets=64,
                                    downsampling_rate=4, local_transformer_stride=4, **NO_DROP_BERT),
               "CanineModel", "chars"),
    "rembert": ("RemBertConfig", dict(BERT_LIKE, input_embedding_size=16, output_embedding_size=16),
                "RemBertForMaskedLM", "text"),
    "megatron-bert": ("MegatronBertConfig", dict(BERT_LIKE), "MegatronBertForMaskedLM", "text"),
    "ernie": ("ErnieConfig", dict(BERT_LIKE), "ErnieForMaskedLM", "text"),
    # encoder-decoders
    "pegasus_x": ("PegasusXConfig", dict(BART_LIKE, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                                         num_global_tokens=4, block_size=4),
                  "PegasusXForConditionalGeneration", "seq2seq"),
    "mvp": ("MvpConfig", dict(BART_LIKE), "MvpForConditionalGeneration", "seq2seq"),
    "blenderbot-small": ("BlenderbotSmallConfig", dict(BART_LIKE),
                         "BlenderbotSmallForConditionalGeneration", "seq2seq"),
    "nllb-moe": ("NllbMoeConfig", dict(BART_LIKE, num_experts=4, expert_capacity=8, encoder_sparse_step=1,
                                       decoder_sparse_step=1, encoder_layerdrop=0.0, decoder_layerdrop=0.0,
                                       moe_token_dropout=0.0), "NllbMoeForConditionalGeneration", "seq2seq"),
    "t5gemma": ("T5GemmaConfig", dict(encoder=dict(LLAMA_LIKE, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
                                                   dropout_rate=0.0),
                                      decoder=dict(LLAMA_LIKE, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
                                                   dropout_rate=0.0),
                                      vocab_size=128, dropout_rate=0.0),
                "T5GemmaForConditionalGeneration", "seq2seq"),
    # vision
    "mobilenet_v1": ("MobileNetV1Config", dict(image_size=IMG, depth_multiplier=0.25, classifier_dropout_prob=0.0,
                                               num_labels=10), "MobileNetV1ForImageClassification", "image"),
    "mobilevitv2": ("MobileViTV2Config", dict(image_size=IMG, width_multiplier=0.25, n_attn_blocks=[1, 1, 1],
                                              output_stride=16,  # the last stage dilated: 2 x 2, not 1 x 1
                                              classifier_dropout_prob=0.0, num_labels=10),
                    "MobileViTV2ForImageClassification", "image"),
    "swiftformer": ("SwiftFormerConfig", dict(image_size=IMG, depths=[1, 1, 1, 1], embed_dims=[8, 16, 24, 32],
                                              mlp_ratio=2, num_labels=10),
                    "SwiftFormerForImageClassification", "image"),
    "dinov2_with_registers": ("Dinov2WithRegistersConfig", dict(image_size=IMG, patch_size=8, hidden_size=32,
                                                                num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                                                                num_register_tokens=2, num_labels=10, **NO_DROP_BERT),
                              "Dinov2WithRegistersForImageClassification", "image"),
    "ijepa": ("IJepaConfig", dict(image_size=IMG, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64, num_labels=10, **NO_DROP_BERT),
              "IJepaForImageClassification", "image"),
    "vitdet": ("VitDetConfig", dict(image_size=IMG, pretrain_image_size=IMG, patch_size=8, hidden_size=32,
                                    num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, window_block_indices=[0],
                                    residual_block_indices=[1], window_size=2, use_relative_position_embeddings=True),
               "VitDetModel", "image"),
    "hgnet_v2": ("HGNetV2Config", dict(embedding_size=8, depths=[1, 1], hidden_sizes=[16, 32], stem_channels=[3, 8, 8],
                                       stage_in_channels=[8, 16], stage_mid_channels=[8, 8],
                                       stage_out_channels=[16, 32], stage_num_blocks=[1, 1],
                                       stage_downsample=[False, True], stage_downsample_strides=[2, 2],
                                       stage_light_block=[False, True], stage_kernel_size=[3, 3],
                                       stage_numb_of_layers=[2, 2], num_labels=10),
                 "HGNetV2ForImageClassification", "image"),
    "textnet": ("TextNetConfig", dict(image_size=[IMG, IMG], stem_out_channels=8, hidden_sizes=[8, 8, 16],
                                      conv_layer_kernel_sizes=[[[3, 3]], [[3, 1]]], conv_layer_strides=[[2], [2]],
                                      num_labels=10), "TextNetForImageClassification", "image"),
    # 32 x 32 in, 64 x 64 out
    "swin2sr": ("Swin2SRConfig", dict(image_size=IMG, embed_dim=16, depths=[1], num_heads=[2], window_size=4,
                                      drop_path_rate=0.0, upscale=2), "Swin2SRForImageSuperResolution", "image"),
    "timesformer": ("TimesformerConfig", dict(image_size=16, patch_size=8, num_frames=2, hidden_size=32,
                                              num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                              num_labels=10), "TimesformerForVideoClassification", "video"),
    "vivit": ("VivitConfig", dict(image_size=16, num_frames=4, tubelet_size=[2, 8, 8], hidden_size=32,
                                  num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, num_labels=10),
              "VivitForVideoClassification", "video"),
    "detr": ("DetrConfig", dict(DETR_LIKE), "DetrForObjectDetection", "image"),
    "conditional_detr": ("ConditionalDetrConfig", dict(DETR_LIKE), "ConditionalDetrForObjectDetection", "image"),
    # speech / audio
    "wav2vec2-conformer": ("Wav2Vec2ConformerConfig", dict(W2V_LIKE, conv_depthwise_kernel_size=3,
                                                           conformer_conv_dropout=0.0, max_source_positions=64),
                           "Wav2Vec2ConformerModel", "audio"),
    "wav2vec2-bert": ("Wav2Vec2BertConfig", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=64, feature_projection_input_dim=16,
                                                 conv_depthwise_kernel_size=3, conformer_conv_dropout=0.0,
                                                 left_max_position_embeddings=8, right_max_position_embeddings=4,
                                                 hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0,
                                                 feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0),
                      "Wav2Vec2BertModel", "audio-features"),
    "unispeech-sat": ("UniSpeechSatConfig", dict(W2V_LIKE), "UniSpeechSatModel", "audio"),
    # codecs: encode, quantize (codebooks of 16), decode; at 400 Hz and hop 4 Encodec's bandwidths give 2 and 4
    # quantizers (the forward uses the first)
    "encodec": ("EncodecConfig", dict(sampling_rate=400, target_bandwidths=[0.8, 1.6], hidden_size=16, num_filters=4,
                                      upsampling_ratios=[2, 2], num_lstm_layers=1, codebook_size=16),
                "EncodecModel", "codec"),
    "mimi": ("MimiConfig", dict(sampling_rate=400, hidden_size=16, num_filters=4, upsampling_ratios=[2, 2],
                                codebook_size=16, codebook_dim=16, num_quantizers=2,
                                vector_quantization_hidden_dimension=16, upsample_groups=16, num_hidden_layers=1,
                                intermediate_size=32, num_attention_heads=2, num_key_value_heads=2, head_dim=8,
                                sliding_window=8, max_position_embeddings=64),
             "MimiModel", "codec"),
    "dac": ("DacConfig", dict(encoder_hidden_size=4, downsampling_ratios=[2, 2], decoder_hidden_size=16, n_codebooks=2,
                              codebook_size=16, codebook_dim=4), "DacModel", "codec"),
    "moonshine": ("MoonshineConfig", dict(vocab_size=128, hidden_size=32, intermediate_size=64,
                                          encoder_num_hidden_layers=1, decoder_num_hidden_layers=1,
                                          encoder_num_attention_heads=2, decoder_num_attention_heads=2,
                                          max_position_embeddings=64),
                  "MoonshineForConditionalGeneration", "audio-seq2seq"),
}
ARCHS.update(THIRD)


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
ARCHS.update(FOURTH)


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
    raise ValueError(kind)
