"""transformers' GPT-2 language model with its KV cache on (its default), random weights.

    pip install transformers          # (scripts/install.sh --dev installs it)
    pipec compile examples/transformers/gpt2.py
    pipec bench examples/transformers/gpt2.py

On a CUDA GPU this is GPT-2 small (124M parameters) on 1 x 128 tokens in fp32; on the CPU,
where kernels run in Triton's interpreter, a 2-layer GPT-2 of width 64 on 1 x 16 tokens.
The model returns the logits and the cache's keys of the last layer, so both are checked.
"""

import torch
import transformers

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
config = transformers.GPT2Config() if CUDA else transformers.GPT2Config(
    n_embd=64, n_layer=2, n_head=4, vocab_size=512, n_positions=64, bos_token_id=0, eos_token_id=0)
LENGTH = 128 if CUDA else 16


class GPT2WithCache(torch.nn.Module):
    """GPT2LMHeadModel returning plain tensors: the logits and the last layer's cached keys."""

    def __init__(self) -> None:
        super().__init__()
        self.lm = transformers.GPT2LMHeadModel(config)

    def forward(self, input_ids: torch.Tensor):
        out = self.lm(input_ids, use_cache=True)
        return out.logits, out.past_key_values.layers[-1].keys


torch.manual_seed(0)
model = GPT2WithCache().to(DEVICE).eval()


def example_inputs():
    g = torch.Generator(device=DEVICE).manual_seed(1)
    return (torch.randint(0, config.vocab_size, (1, LENGTH), generator=g, device=DEVICE),)
