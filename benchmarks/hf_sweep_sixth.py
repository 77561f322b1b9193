"""The breadth sweep's sixth batch (session 49): `SIXTH`, causal language models of transformers 5.17
that no earlier batch had, in the form of `hf_sweep_archs.ARCHS` (config class, tiny config, model
class, input kind). Hidden 32, 1-2 layers, 4 experts (2 a token): each runs in seconds on the CPU.
Left out: step3p5 (no ForCausalLM in 5.17), qwen3_5 (its text model is the first batch's qwen3_5_text)."""

from __future__ import annotations

from hf_sweep_configs import DEEPSEEK_LIKE, LLAMA_LIKE, SLIDING_FULL

# a routed MoE of 4 experts, 2 a token, after one dense layer
MOE = dict(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
DENSE_SPARSE = ["dense", "sparse"]
# multi-head latent attention (DeepSeek V2 / V3 style) without DeepSeek's MoE keys
MLA = dict(kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=4, v_head_dim=8, qk_nope_head_dim=4)
# DeepSeek V3.2's / GLM-5's sparse (indexed) attention: a lightning indexer picking index_topk keys
INDEXED = dict(index_topk=4, index_head_dim=8, index_n_heads=2, mlp_layer_types=DENSE_SPARSE,
               layer_types=["indexed_attention"] * 2)

SIXTH = {
    # dense decoders
    "cwm": ("CwmConfig", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, layer_types=["full_attention",
                                                                                      "sliding_attention"]),
            "CwmForCausalLM", "lm"),
    "internlm3": ("InternLM3Config", dict(LLAMA_LIKE, head_dim=8), "LlamaForCausalLM", "lm"),
    "jais2": ("Jais2Config", dict(LLAMA_LIKE, head_dim=8), "Jais2ForCausalLM", "lm"),  # LayerNorm, relu^2, biases
    "ministral3": ("Ministral3Config", dict(LLAMA_LIKE, head_dim=8,
                                            rope_parameters=dict(rope_type="yarn", rope_theta=1e6, factor=4.0,
                                                                 original_max_position_embeddings=16,
                                                                 llama_4_scaling_beta=0.1)),
                   "Ministral3ForCausalLM", "lm"),
    "nanochat": ("NanoChatConfig", dict(LLAMA_LIKE, num_key_value_heads=4), "NanoChatForCausalLM", "lm"),
    # dynamic mask attention: a top-k of exp(A * softplus(dt)) over the keys; A starts at 0, so every score is
    # 1.0 and the top-k picks among ties (pipec's topk: the earliest index; eager's CPU kernel: another)
    "doge": ("DogeConfig", dict(LLAMA_LIKE, keep_window_size=4), "DogeForCausalLM", "lm"),
    "youtu": ("YoutuConfig", dict(LLAMA_LIKE, num_key_value_heads=4, **MLA), "YoutuForCausalLM", "lm"),
    "gpt_neox_japanese": ("GPTNeoXJapaneseConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                                        num_attention_heads=4, max_position_embeddings=64,
                                                        attention_dropout=0.0),
                          "GPTNeoXJapaneseForCausalLM", "lm"),
    "cpmant": ("CpmAntConfig", dict(vocab_size=128, hidden_size=32, num_attention_heads=4, dim_head=8, dim_ff=64,
                                    num_hidden_layers=2, position_bias_num_buckets=32, position_bias_max_distance=64,
                                    prompt_types=4, prompt_length=2, segment_types=4),
               "CpmAntForCausalLM", "lm"),
    "hrm_text": ("HrmTextConfig", dict(LLAMA_LIKE, num_key_value_heads=4, head_dim=8, num_hidden_layers=2,
                                       num_layers_per_stack=1, H_cycles=1, L_cycles=1, L_bp_cycles=[1]),
                 "HrmTextForCausalLM", "lm"),
    # mixtures of experts (afmoe's router gate starts at zero: ties in its top-k, as doge's)
    "afmoe": ("AfmoeConfig", dict(LLAMA_LIKE, head_dim=8, num_dense_layers=1, num_shared_experts=1, sliding_window=4,
                                  layer_types=SLIDING_FULL, **MOE), "AfmoeForCausalLM", "lm"),
    "exaone_moe": ("ExaoneMoeConfig", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, layer_types=SLIDING_FULL,
                                           mlp_layer_types=DENSE_SPARSE, first_k_dense_replace=1,
                                           num_shared_experts=1, **MOE), "ExaoneMoeForCausalLM", "lm"),
    "flex_olmo": ("FlexOlmoConfig", dict(LLAMA_LIKE, pad_token_id=0, num_experts=4, num_experts_per_tok=2), "FlexOlmoForCausalLM", "lm"),
    "glm4_moe_lite": ("Glm4MoeLiteConfig", dict(DEEPSEEK_LIKE, n_group=1, mlp_layer_types=DENSE_SPARSE),
                      "Glm4MoeLiteForCausalLM", "lm"),
    "hy_v3": ("HYV3Config", dict(LLAMA_LIKE, head_dim=8, num_shared_experts=1, mlp_layer_types=DENSE_SPARSE, **MOE),
              "HYV3ForCausalLM", "lm"),
    "laguna": ("LagunaConfig", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, layer_types=SLIDING_FULL,
                                    num_attention_heads_per_layer=[4, 4], mlp_layer_types=DENSE_SPARSE,
                                    shared_expert_intermediate_size=32, **MOE), "LagunaForCausalLM", "lm"),
    "mellum": ("MellumConfig", dict(LLAMA_LIKE, head_dim=8, sliding_window=4, layer_types=SLIDING_FULL,
                                    mlp_layer_types=DENSE_SPARSE, moe_intermediate_size=32, num_local_experts=4,
                                    num_experts_per_tok=2), "MellumForCausalLM", "lm"),
    "mimo_v2_flash": ("MiMoV2FlashConfig", dict(LLAMA_LIKE, head_dim=12, v_head_dim=8, sliding_window=4,
                                                layer_types=SLIDING_FULL, mlp_layer_types=DENSE_SPARSE,
                                                moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2),
                      "MiMoV2FlashForCausalLM", "lm"),
    "minimax_m2": ("MiniMaxM2Config", dict(LLAMA_LIKE, head_dim=8, num_local_experts=4, num_experts_per_tok=2),
                   "MiniMaxM2ForCausalLM", "lm"),
    "solar_open": ("SolarOpenConfig", dict(LLAMA_LIKE, head_dim=8, moe_intermediate_size=32, n_shared_experts=1,
                                           n_routed_experts=4, num_experts_per_tok=2), "SolarOpenForCausalLM", "lm"),
    "longcat_flash": ("LongcatFlashConfig", dict(vocab_size=128, hidden_size=32, num_layers=1, num_attention_heads=4,
                                                 num_key_value_heads=4, max_position_embeddings=64, ffn_hidden_size=64,
                                                 expert_ffn_hidden_size=32, moe_topk=2, n_routed_experts=4,
                                                 zero_expert_num=2, head_dim=4, qk_head_dim=8, **MLA),
                      "LongcatFlashForCausalLM", "lm"),
    # sparse attention (an indexer; glm_moe_dsa's scores are a relu's, exact zeros tie), linear attention, hybrids
    "deepseek_v32": ("DeepseekV32Config", dict(DEEPSEEK_LIKE, head_dim=4, qk_head_dim=8, **INDEXED),
                     "DeepseekV32ForCausalLM", "lm"),
    "glm_moe_dsa": ("GlmMoeDsaConfig", dict(DEEPSEEK_LIKE, n_group=1, head_dim=4, **INDEXED),
                    "GlmMoeDsaForCausalLM", "lm"),
    "kimi_linear": ("KimiLinearConfig", dict(LLAMA_LIKE, pad_token_id=0, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None,
                                             qk_rope_head_dim=4, v_head_dim=8, qk_nope_head_dim=4, num_shared_experts=1,
                                             moe_intermediate_size=32, num_experts=4, num_experts_per_token=2,
                                             mlp_layer_types=DENSE_SPARSE,
                                             layer_types=["linear_attention", "full_attention"],
                                             linear_head_dim=8, linear_num_heads=4, linear_conv_kernel_dim=4),
                    "KimiLinearForCausalLM", "lm"),
    "lfm3": ("Lfm3Config", dict(LLAMA_LIKE, pad_token_id=0, head_dim=8, conv_L_cache=3, sliding_window=4,
                                layer_types=["conv", "full_attention"]), "Lfm3ForCausalLM", "lm"),
    "zaya": ("ZayaConfig", dict(LLAMA_LIKE, head_dim=8, num_experts=4, num_experts_per_tok=1, moe_intermediate_size=32,
                                router_hidden_size=16), "ZayaForCausalLM", "lm"),
    "deepseek_v4": ("DeepseekV4Config", dict(LLAMA_LIKE, num_key_value_heads=1, head_dim=16, q_lora_rank=16,
                                             qk_rope_head_dim=4, moe_intermediate_size=32, n_routed_experts=4,
                                             num_experts_per_tok=2, n_shared_experts=1, sliding_window=4,
                                             layer_types=["compressed_sparse_attention",
                                                          "heavily_compressed_attention"],
                                             compress_rates=dict(compressed_sparse_attention=2,
                                                                 heavily_compressed_attention=4),
                                             mlp_layer_types=["hash_moe", "moe"], hc_mult=2, hc_sinkhorn_iters=3,
                                             o_groups=2, o_lora_rank=16, index_n_heads=2, index_head_dim=8,
                                             index_topk=2, num_nextn_predict_layers=0),
                    "DeepseekV4ForCausalLM", "lm"),
}
