"""What users do with a compiled transformers model beyond one forward: decode with `generate`
(its KV cache dynamic, or the static cache of transformers' torch.compile recipe with
fullgraph, or transformers' own compile of the decoding step under CUDA Graphs, simulated on the
CPU), train with gradient checkpointing, and compile the optimizer's step. Tiny configs of
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


class _RecordedRun:
    """A CUDA Graph as the runtime's CPU tests simulate one: a replay runs the program again on
    the inputs it pinned (checked to be at their recorded addresses) or on its own buffers, and
    copies the results into the outputs it had at record time."""

    def __init__(self, runner, graph_inputs, values, device, call_inputs):
        self.runner, self.values, self.device, self.call_inputs = runner, values, device, call_inputs
        self.pinned = {i: t.data_ptr() for i, t in enumerate(graph_inputs) if t is call_inputs[0][i]}
        written = {k for k, _ in runner.write_index}  # a record runs nothing on the caller's memory
        self.buffers = {i: t for i, t in enumerate(graph_inputs) if i not in self.pinned}
        self.outputs = runner.run([t.clone() if i in written else t for i, t in enumerate(graph_inputs)], values, device)

    def replay(self):
        inputs = self.call_inputs[0]
        assert all(inputs[i].data_ptr() == p for i, p in self.pinned.items()), "a pinned input moved"
        live = [inputs[i] if i in self.pinned else self.buffers[i] for i in range(len(inputs))]
        for dst, src in zip(self.outputs, self.runner.run(live, self.values, self.device)):
            if dst is not None and dst.data_ptr() != src.data_ptr():
                dst.copy_(src)


def test_decoding_under_cuda_graphs_records_once_per_generate(monkeypatch):
    """transformers' own compile of the decoding step (`compile_config`, mode reduce-overhead)
    with pipec, over the `cudagraph` runtime with simulated graphs: every `generate` makes a new
    static cache (tensors marked static), so its first step records a graph pinning that cache and
    the others replay it on the fast path. Past the runtime's record limits too (10 generates):
    no plain launches, no warning, eager's tokens every time."""
    from pipec_runtime_cudagraph import cudagraph

    calls = {"general": 0, "records": 0}
    current: list = [None]

    class Simulated(cudagraph.CudaGraphProgram):
        device_type = "cpu"

        def __call__(self, inputs, in_range=False):
            current[0] = list(inputs)
            return super().__call__(inputs, in_range)

        def _call(self, inputs):
            calls["general"] += 1
            return super()._call(inputs)

        def _record_graph(self, inputs, own, values, device, warmups, share=None):
            calls["records"] += 1
            buffers = {i: self.padding.padded_input(i, inputs[i], values) for i in own}
            run = _RecordedRun(self.runner, [buffers.get(i, t) for i, t in enumerate(inputs)], values, device, current)
            return run, run.outputs, buffers

    monkeypatch.setattr(cudagraph, "_current_device", lambda: -1)
    monkeypatch.setattr(cudagraph, "load_cudagraph", lambda program, options=None, context=None:
                        Simulated(program, options, context))
    model = causal_lm("llama")
    ids = torch.randint(3, model.config.vocab_size, (1, 5), generator=torch.Generator().manual_seed(2))
    config = transformers.CompileConfig(backend="pipec", mode="reduce-overhead")
    config._compile_all_devices = True  # transformers compiles the decoding step on CUDA only otherwise
    settings = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0, cache_implementation="static")
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", PipecFallbackWarning)
        warnings.filterwarnings("error", message="cudagraph runtime")
        expected = model.generate(ids, disable_compile=True, **settings)
        generates = 10
        for _ in range(generates):
            assert torch.equal(model.generate(ids, compile_config=config, **settings), expected)
    assert calls["records"] == generates  # one a generate: four decoding steps each, the first records
    assert calls["general"] == generates  # the other three took the generated fast path
