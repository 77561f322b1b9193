"""The tiny configs several batches of `hf_sweep_archs.py` share (and the inputs' sizes)."""

from __future__ import annotations

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

SLIDING_FULL = ["sliding_attention", "full_attention"]
