"""What users do with a compiled transformers model beyond one forward: decode with `generate`
(its KV cache dynamic, or the static cache of transformers' torch.compile recipe with
fullgraph), train with gradient checkpointing, and compile the optimizer's step. Tiny configs of
hf_models.py, float32, on the CPU, checked against eager."""

import copy
import warnings

import pytest
import torch
import transformers

import hf_models
import pipec
from pipec.errors import PipecFallbackWarning


def causal_lm(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = hf_models.BY_NAME[name].config(True)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("name, cache", [("gpt2", "dynamic"), ("llama", "static")])
def test_generate_matches_eager(name, cache):
    """Greedy decoding of 6 tokens: the prefill and every decode step through the compiled
    forward give eager's tokens, and its scores at each step."""
    model = causal_lm(name)
    if cache == "static":  # transformers' recipe for torch.compile: fixed shapes, whole graphs
        model.generation_config.cache_implementation = "static"
    ids = torch.randint(0, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    settings = dict(max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True,
                    pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(ids, **settings)
        model.forward = pipec.compile(model.forward, fullgraph=cache == "static")
        with warnings.catch_warnings():
            warnings.simplefilter("error", PipecFallbackWarning)
            got = model.generate(ids, **settings)
    assert torch.equal(got.sequences, expected.sequences)
    torch.testing.assert_close(torch.stack(got.scores), torch.stack(expected.scores))


def test_training_with_gradient_checkpointing():
    """`gradient_checkpointing_enable()`: each decoder layer is recomputed in the backward, and
    its attention (random-tagged, at dropout 0) is compiled, not the step run eagerly."""
    built = hf_models.build_training("gpt2")
    eager = built.model
    eager.model.gradient_checkpointing_enable()
    model = copy.deepcopy(eager)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PipecFallbackWarning)
        loss = pipec.compile(model)(*built.inputs)
        loss.backward()
    expected = eager(*built.inputs)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close({n: p.grad for n, p in model.named_parameters()},
                               {n: p.grad for n, p in eager.named_parameters()})


def test_compiled_adamw_step_on_a_decoder():
    """`pipec.compile(optimizer.step)` on every parameter of a decoder: AdamW's foreach ops are
    lowered (no extern, no warning), and parameters and state follow the uncompiled step."""
    model = causal_lm("llama")
    models = [model, copy.deepcopy(model)]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=True) for m in models]
    steps = [opts[0].step, pipec.compile(opts[1].step)]
    gen = torch.Generator().manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PipecFallbackWarning)
        for _ in range(2):
            grads = [torch.randn(p.shape, generator=gen) for p in models[0].parameters()]
            for model, step in zip(models, steps):
                for p, g in zip(model.parameters(), grads):
                    p.grad = g.clone()
                step()
    torch.testing.assert_close(dict(models[1].named_parameters()), dict(models[0].named_parameters()))
