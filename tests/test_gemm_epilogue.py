"""GEMM epilogue fusion end to end: Linear + bias + activation (+ residual) as one matmul kernel,
its two alternatives (Triton template, cuBLAS + pointwise kernel) and the runtime's choice between them.

CPU: Triton's interpreter, fp32, tiny odd shapes. GPU-only tests cover bf16 and the timing choice.
"""

import logging
import math
import os
import re

import pytest
import torch
from torch import nn

import pipec
import pipec_ir
from pipec_ir import get_attr
from pipec_runtime_cudagraph.choices import choices_made
from pipec_runtime_cudagraph.launch import ProgramRunner

GPU = torch.cuda.is_available()
# Bounds-checked kernels (PIPEC_BOUNDS_CHECK=1, scripts/gpu_sanitize.sh) name their kernel and
# buffer in each assertion, so identical layers no longer share one source, and they leave the
# Gluon ping-pong kernel out (it has no checked form): tests of those choices need plain kernels.
PLAIN_KERNELS_ONLY = pytest.mark.skipif(os.environ.get("PIPEC_BOUNDS_CHECK", "0") not in ("", "0"),
                                        reason="asserts the choices made among unchecked kernels")


class GeluNew(nn.Module):
    """transformers' NewGELUActivation ("gelu_new": GPT-2, Phi): tanh-GELU written as arithmetic,
    which capture folds into one gelu op (fold_gelu.py)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACTS = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "relu": nn.ReLU(), "silu": nn.SiLU(),
        "gelu_new": GeluNew()}


class LinearAct(nn.Module):
    def __init__(self, act, k=32, n=24):
        super().__init__()
        self.lin, self.act = nn.Linear(k, n), ACTS[act]

    def forward(self, x, r):
        return self.act(self.lin(x)) * 0.5 + r


def _program(model, inputs, **options):
    """(the Program pipec compiles for `model`'s inference graph, the tensors it is called with)."""
    from pipec.pipeline import compile_graph
    from pipec_capture import make_dynamo_backend

    programs, calls = [], []

    def backend(gm, example_inputs):
        def compile_aten(aten_gm, aten_inputs, kind):
            programs.append(compile_graph(aten_gm, aten_inputs, pipec.make_options(**options), stop_after="codegen"))

            def run(args):
                calls.append(list(args))
                return aten_gm(*args)
            return run
        return make_dynamo_backend(compile_aten)(gm, example_inputs)

    with torch.no_grad():
        torch.compile(model, backend=backend)(*inputs)
    [program], [args] = programs, calls
    return program, args


def _inputs(device="cpu", dtype=torch.float32, m=16, k=32, n=24):
    torch.manual_seed(0)
    return torch.randn(m, k, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype)


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("choice", [None, "library"])
def test_linear_activation_residual_matches_eager(act, choice):
    model = LinearAct(act).eval()
    x, r = _inputs()
    options = {} if choice is None else {"choice": choice}
    compiled = pipec.compile(model, **options)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, r), model(x, r))


@pytest.mark.parametrize("act", ["relu", "gelu_tanh", "gelu", "silu", "gelu_new"])
def test_library_alternatives_follow_the_epilogue(act):
    """Linear + bias offers plain mm with the bias in the pointwise kernel ("library_mm"); ReLU and
    tanh-GELU also cuBLASLt's bias + activation epilogue ("library_act"), exact GELU and SiLU not.
    Each alternative, forced, matches eager."""
    model = LinearAct(act).eval()
    x, r = _inputs()
    program, args = _program(model, (x, r))
    alternatives = {get_attr(s.attrs, "alternative") for s in program.steps} - {None}
    with_act = {"library_act"} if act in ("relu", "gelu_tanh", "gelu_new") else set()
    assert alternatives == {"template", "library", "library_mm"} | with_act
    if with_act:
        call = next(s for s in program.steps if get_attr(s.attrs, "alternative") == "library_act")
        assert call.target == ("pipec.addmm_gelu_tanh.default" if act in ("gelu_tanh", "gelu_new") else
                               "aten._addmm_activation.default")
    with torch.no_grad():
        want = model(x, r)
    for choice in sorted(alternatives):
        forced = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
        torch.testing.assert_close(forced(args)[0], want)


def test_activation_epilogue_through_the_reshape_of_a_3d_linear():
    """nn.Linear on [B, T, K] puts a reshape between the bias add and GELU: "library_act" still
    applies (its [B*T, N] result reshaped back), and every alternative matches eager."""
    model = LinearAct("gelu_tanh").eval()
    torch.manual_seed(1)
    x, r = torch.randn(2, 5, 32), torch.randn(2, 5, 24)
    program, args = _program(model, (x, r))
    steps = [s for s in program.steps if get_attr(s.attrs, "alternative") == "library_act"]
    assert [s.target for s in steps][:2] == ["pipec.addmm_gelu_tanh.default", "aten.reshape.default"]
    with torch.no_grad():
        want = model(x, r)
    for choice in ("template", "library", "library_mm", "library_act"):
        forced = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
        torch.testing.assert_close(forced(args)[0], want)


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh"])
def test_linear_on_a_batch_of_one_keeps_its_epilogue(act):
    """nn.Linear on [1, T, K]: the epilogue runs over [1, T, N], a reshape of the [T, N] product
    by a size-1 dim only; it still joins the GEMM, and every alternative matches eager."""
    model = LinearAct(act).eval()
    torch.manual_seed(2)
    x, r = torch.randn(1, 5, 32), torch.randn(1, 5, 24)
    program, args = _program(model, (x, r))
    # bias, GELU and the scaled residual: one matmul kernel (plus each cuBLAS alternative's pass)
    assert [k.name for k in program.kernels][0] == "pipec_fused_mm_add_gelu_mul_2"
    assert all(k.name.startswith("pipec_fused_mm_add_gelu_mul_2") for k in program.kernels)
    alternatives = {get_attr(s.attrs, "alternative") for s in program.steps} - {None}
    assert "template" in alternatives and "library" in alternatives
    with torch.no_grad():
        want = model(x, r)
    for choice in sorted(alternatives):
        forced = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
        torch.testing.assert_close(forced(args)[0], want)


@pytest.mark.parametrize("fusion", ["default", "aggressive"])
def test_linear_with_one_output_column_and_a_constant_scale(fusion):
    """N = 1: the product and its epilogue are [M, 1]; the cuBLAS alternative's pointwise pass
    indexes its [M, 1] domain (it failed with "mul's shape [5, 1] is no reshape of the
    epilogue's domain [5, 1]"; found by the fuzzer)."""
    def f(x, w, b):
        return nn.functional.linear(x, w, b) * torch.tensor([0.5])

    torch.manual_seed(0)
    x, w, b = torch.randn(5, 3), torch.randn(1, 3), torch.randn(1)
    compiled = pipec.compile(f, fusion=fusion, cache="none")
    torch.testing.assert_close(compiled(x, w, b), f(x, w, b))


@pytest.mark.parametrize("fusion", ["default", "aggressive"])
def test_batched_epilogue_reading_a_value_per_batch(fusion):
    """bmm of [2, 1, 1] operands with a residual indexed by the batch only (pid_b, a scalar per
    tile): its load had the tile's block mask on a scalar pointer, which Triton rejects ("Mask
    argument cannot be block type if pointer argument is not a block"; found by the fuzzer)."""
    def f(x, y, b):
        return x + ((x @ y) + b)

    torch.manual_seed(0)
    x, y, b = torch.randn(2, 1, 1), torch.randn(2, 1, 1), torch.randn(1)
    compiled = pipec.compile(f, fusion=fusion, cache="none")
    torch.testing.assert_close(compiled(x, y, b), f(x, y, b))


def test_specialized_run_drops_views_only_unpicked_alternatives_read():
    """The Linear's permuted weight feeds cuBLAS; the template reads the weight itself, so the
    specialized run of the template leaves the permute out, and that of "library" keeps it."""
    device = "cuda" if GPU else "cpu"  # CPU tensors on a GPU machine take a path that is not specialized
    model = LinearAct("relu").to(device).eval()
    program, args = _program(model, _inputs(device))
    with torch.no_grad():
        want = model(*_inputs(device))
    sources = {}
    for choice in ("template", "library"):
        runner = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
        for _ in range(3):  # the first call takes the general path and builds the specialized run
            torch.testing.assert_close(runner(args)[0], want)
        [(_, run)] = runner.specialized.values()
        sources[choice] = run.source
    # the permuted weight is one view of the weight input (v0), made without the dispatcher
    # (views.py); the template reads the weight itself and makes no view at all
    assert "REINTERPRET" not in sources["template"] and "permute" not in sources["template"]
    lines = sources["library"].splitlines()
    permuted = next(ln.split("=")[0].strip() for ln in lines if "REINTERPRET(v0," in ln)
    # within the picked alternative a value dies at its own last use: the permuted weight right
    # after cuBLAS, before the epilogue's kernel (not after the whole choice group)
    call = next(k for k, ln in enumerate(lines) if "addmm" in ln)
    released = [name.strip() for name in lines[call + 1].split("=")]
    assert released[-1] == "None" and permuted in released
    # and the epilogue kernel writes its output over cuBLAS's result, which dies there: nothing is
    # allocated for it (the output is that storage, taken after cuBLAS ran)
    assert not [ln for ln in lines if "EMPTY" in ln]
    over = [k for k, ln in enumerate(lines) if "WRITTEN_OVER" in ln]
    assert over and min(over) > call


class TransposedWeight(nn.Module):
    """`x @ w + b` then ReLU, with `w` an input that arrives transposed (as a backward graph's
    saved transposed weights did): the template reads it as a row-major operand, cuBLAS as it is."""

    def forward(self, x, w, b):
        return torch.relu(x @ w + b)


def test_an_input_only_an_unpicked_template_reads_is_not_copied():
    """The runtime makes an input dense where a kernel reads it. Once "library" is picked the
    template does not run, so the specialized run passes the transposed input to cuBLAS as it is
    (before: one copy per call, 72 a step in GPT-2's training on the H200)."""
    device = "cuda" if GPU else "cpu"  # CPU tensors on a GPU machine take a path that is not specialized
    torch.manual_seed(0)
    inputs = (torch.randn(16, 32, device=device), torch.randn(24, 32, device=device).t(), torch.randn(24, device=device))
    program, args = _program(TransposedWeight().to(device), inputs)
    want = TransposedWeight()(*inputs)
    sources = {}
    for choice in ("template", "library"):
        runner = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
        for _ in range(3):  # the first call takes the general path and builds the specialized run
            torch.testing.assert_close(runner(list(args))[0], want)
        [(_, run)] = runner.specialized.values()
        sources[choice] = run.source
    copied = re.compile(r"^\s+(v\d+) = \1\.contiguous\(\)$", re.M)  # an input made dense (guard_lines)
    assert copied.search(sources["template"])
    assert not copied.search(sources["library"])


def test_specialized_library_act_calls_aten_directly_on_cuda():
    """The specialized run calls cuBLASLt's bias + tanh-GELU (`aten._addmm_activation`) itself on
    CUDA, not through the pipec.addmm_gelu_tanh dispatcher entry; on the CPU, whose kernel of that
    op applies the exact GELU, it keeps pipec's op. Both match eager."""
    device = "cuda" if GPU else "cpu"
    model = LinearAct("gelu_tanh").to(device).eval()
    program, args = _program(model, _inputs(device))
    with torch.no_grad():
        want = model(*_inputs(device))
    runner = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice="library_act"))
    for _ in range(3):  # the first call takes the general path and builds the specialized run
        torch.testing.assert_close(runner(args)[0], want)
    [(_, run)] = runner.specialized.values()
    call = next(ln for ln in run.source.splitlines() if "addmm" in ln)
    if GPU:
        assert "_addmm_activation" in call and "use_gelu=True" in call
    else:
        assert "pipec_addmm_gelu_tanh" in call and "use_gelu" not in call


def test_program_has_one_choice_group_per_linear():
    model = nn.Sequential(nn.Linear(32, 40), nn.GELU(), nn.Linear(40, 24)).eval()
    x, _ = _inputs()
    program, args = _program(model, (x,))
    groups = {get_attr(s.attrs, "choice") for s in program.steps} - {None}
    assert len(groups) == 2
    defaults = [s.target for s in program.steps if get_attr(s.attrs, "default")]
    assert len(defaults) == 2 and all(program.kernel_map()[t].source.count("tl.dot(") == 1 for t in defaults)
    runner = ProgramRunner(program, pipec_ir.CompileOptions())
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(runner(args)[0], want)
    for choice in ("template", "library"):
        forced = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
        torch.testing.assert_close(forced(args)[0], want)
        assert {g["forced"] for g in choices_made(forced).values()} == {choice}


def test_none_policy_keeps_cublas_and_separate_kernels():
    model = LinearAct("relu").eval()
    program, _ = _program(model, _inputs(), fusion="none")
    assert all(get_attr(s.attrs, "choice") is None for s in program.steps)
    assert "aten.mm.default" in [s.target for s in program.steps]


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_gpu_bf16_mlp_both_alternatives_and_timed_choice():
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda().to(torch.bfloat16).eval()
    torch.manual_seed(0)
    x = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)
    program, args = _program(model, (x,))
    with torch.no_grad():
        want = model(x)
    for choice in ("template", "library"):
        forced = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
        torch.testing.assert_close(forced(args)[0], want, atol=4e-2, rtol=2e-2)
    tuned = ProgramRunner(program, pipec_ir.CompileOptions(autotune=True))
    torch.testing.assert_close(tuned(args)[0], want, atol=4e-2, rtol=2e-2)
    report = choices_made(tuned)
    assert len(report) == 2
    for group in report.values():
        (timings,) = group["timings_ms"].values()
        assert set(timings) == {"template", "library", "library_mm"} and all(0 < t < 1e3 for t in timings.values())
        (chosen,) = group["chosen"].values()
        assert chosen == min(timings, key=timings.get)


class Mlp3d(nn.Module):
    """GPT-2's MLP on [B, T, C]: each Linear is reshape -> addmm -> reshape around its epilogue."""

    def __init__(self, c=16, hidden=24):
        super().__init__()
        self.fc, self.proj, self.act = nn.Linear(c, hidden), nn.Linear(hidden, c), nn.GELU(approximate="tanh")

    def forward(self, x):
        return x + self.proj(self.act(self.fc(x)))


def test_linear_on_3d_input_fuses_gelu_and_residual_into_the_template():
    torch.manual_seed(0)
    model, x = Mlp3d().eval(), torch.randn(2, 5, 16)
    program, args = _program(model, (x,))
    launches = [s for s in program.steps if s.kind == "launch"]
    template = [s for s in launches if get_attr(s.attrs, "alternative") == "template"]
    # the whole MLP is two template launches: GELU and the residual add ride on the tiles
    assert len(template) == 2 and all(get_attr(s.attrs, "choice") for s in launches)
    sources = [program.kernel_map()[s.target].source for s in template]
    assert "tanh" in sources[0] or "sigmoid" in sources[0]
    with torch.no_grad():
        want = model(x)
    for choice in ("template", "library"):
        runner = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
        torch.testing.assert_close(runner(args)[0], want)
    # the library alternative: addmm then one pointwise kernel per Linear
    library = [s for s in program.steps if get_attr(s.attrs, "alternative") == "library"]
    assert [s.kind for s in library] == ["extern", "launch", "extern", "launch"]
    assert [s.target for s in library if s.kind == "extern"] == ["aten.addmm.default"] * 2


@PLAIN_KERNELS_ONLY
def test_identical_choice_groups_share_one_digest():
    """Two identical Linear+ReLU layers make choice groups with one digest (the second layer, a
    second compile and a second process take the first one's timed pick); a different width does not."""
    from pipec_runtime_cudagraph.choices import choice_digest

    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 24), nn.ReLU())
    x, _ = _inputs()
    program, args = _program(model.eval(), (x,))
    runner = ProgramRunner(program, pipec_ir.CompileOptions())
    groups = [step for step, _ in runner.steps_for(torch.device("cpu")) if hasattr(step, "alternatives")]
    assert len(groups) == 3
    digests = [choice_digest(runner, g.alternatives) for g in groups]
    assert digests[0] == digests[1] != digests[2]
    with torch.no_grad():
        torch.testing.assert_close(runner(args)[0], model(x))


@PLAIN_KERNELS_ONLY
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_gpu_a_second_runner_takes_the_timed_pick_without_timing(monkeypatch, tmp_path):
    from pipec_runtime_cudagraph import choices

    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU()).cuda().eval()
    x = torch.randn(64, 128, device="cuda")
    program, args = _program(model, (x,))
    timed = []
    real = choices._timed
    monkeypatch.setattr(choices, "_timed", lambda runs, graphed, prune=None: timed.append(len(runs)) or real(runs, graphed, prune))
    options = pipec_ir.CompileOptions(autotune=True)
    first = ProgramRunner(program, options, pipec_ir.LoadContext(kernel_dir=str(tmp_path)))
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(first(args)[0], want, atol=1e-3, rtol=1e-3)
    assert len(timed) == 1  # the two identical layers: timed once
    # another model (or process): its own memo, only the tuning cache on disk is shared
    second = ProgramRunner(program, options, pipec_ir.LoadContext(kernel_dir=str(tmp_path)))
    torch.testing.assert_close(second(args)[0], want, atol=1e-3, rtol=1e-3)
    assert len(timed) == 1
    picks = lambda r: sorted(a for g in choices_made(r).values() for a in g["chosen"].values())  # noqa: E731
    assert picks(first) == picks(second)


HOPPER = GPU and torch.cuda.get_device_capability()[0] >= 9



def _with_misaligned_copy(args: list, x: torch.Tensor) -> list:
    """`args` with the tensor `x` replaced by a copy that starts 2 bytes into its storage, which
    a TMA descriptor cannot read."""
    from pipec_runtime_cudagraph.tma import misaligned

    storage = torch.empty(x.numel() + 1, device=x.device, dtype=x.dtype)
    shifted = storage[1:].view_as(x).copy_(x)
    assert misaligned([shifted], [0])
    at = next(j for j, a in enumerate(args) if a.data_ptr() == x.data_ptr())
    return [*args[:at], shifted, *args[at + 1:]]


@pytest.mark.skipif(not HOPPER, reason="the persistent TMA template needs a Hopper (or newer) GPU")
def test_gpu_persistent_tma_template_aligned_and_misaligned_inputs():
    """A bf16 Linear + GELU with enough tiles for the persistent TMA configs, template forced and
    tuned: right on an aligned input (tuning may pick TMA) and then on one that starts 2 bytes into
    its storage, which a TMA config cannot read (the runtime runs configs[0] for that call)."""
    model = nn.Sequential(nn.Linear(512, 4096), nn.GELU()).cuda().to(torch.bfloat16).eval()
    torch.manual_seed(0)
    x = torch.randn(8192, 512, device="cuda", dtype=torch.bfloat16)
    program, args = _program(model, (x,))
    kernel = next(k for k in program.kernels if "make_tensor_descriptor" in k.source)
    assert any(dict(c.constants)["TMA"] for c in kernel.configs)
    runner = ProgramRunner(program, pipec_ir.CompileOptions(autotune=True).with_extra(choice="template"))
    moved = _with_misaligned_copy(args, x)
    with torch.no_grad():
        want = model(x)
        for call in (args, moved, args, moved):
            torch.testing.assert_close(runner(call)[0], want, atol=4e-2, rtol=2e-2)


@PLAIN_KERNELS_ONLY
@pytest.mark.skipif(not GPU or torch.cuda.get_device_capability() != (9, 0),
                    reason="the Gluon ping-pong kernel needs an sm_90 GPU (wgmma)")
# 8 tiles per program, edges in M, N and K; 1089 tiles over 132 programs (an odd count: a consumer
# with one tile fewer)
@pytest.mark.parametrize("m, k, n, act, bias", [(4096, 512, 4096, "gelu", True), (4000, 520, 4100, "gelu", True),
                                                (4224, 512, 4224, "gelu", True), (8192, 768, 3072, "gelu_tanh", False),
                                                (4000, 520, 4100, "silu", True)])
def test_gpu_pingpong_alternative_matches_eager(m, k, n, act, bias):
    """bf16 Linear + GELU (exact; tanh, without a bias: with one cuBLASLt applies it) or SiLU
    (Gluon spells their sigmoid) through the Gluon ping-pong kernel alone (forced): tiles that
    fill the shape, and edges in M, N and K (there the output leaves through pointer stores);
    then an input 2 bytes into its storage, which the kernel's TMA loads cannot read (the
    runtime copies it to aligned memory first), and the timed choice among every alternative."""
    activation = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "silu": nn.SiLU()}[act]
    model = nn.Sequential(nn.Linear(k, n, bias=bias), activation).cuda().to(torch.bfloat16).eval()
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    program, args = _program(model, (x,))
    assert any(kern.name.endswith("_pingpong") for kern in program.kernels)
    runner = ProgramRunner(program, pipec_ir.CompileOptions(autotune=True).with_extra(choice="pingpong"))
    moved = _with_misaligned_copy(args, x)
    with torch.no_grad():
        want = model(x)
        for call in (args, moved, args):
            torch.testing.assert_close(runner(call)[0], want, atol=4e-2, rtol=2e-2)
        tuned = ProgramRunner(program, pipec_ir.CompileOptions(autotune=True))
        torch.testing.assert_close(tuned(args)[0], want, atol=4e-2, rtol=2e-2)
    (group,) = choices_made(tuned).values()
    (timings,) = group["timings_ms"].values()
    assert "pingpong" in timings and all(0 < t < 1e3 for t in timings.values())


@pytest.mark.skipif(GPU, reason="what Triton's CPU interpreter does with a Gluon kernel")
def test_forcing_the_gluon_alternative_on_the_cpu_says_why():
    """The program of a large bf16 Linear + GELU holds the Gluon ping-pong alternative; the CPU
    never picks it, and forcing it gives a clear error instead of Triton's driver lookup failing."""
    from pipec_runtime_cudagraph.launch import ProgramLoadError

    model = nn.Sequential(nn.Linear(64, 4352), nn.GELU()).to(torch.bfloat16).eval()
    x = torch.randn(2048, 64, dtype=torch.bfloat16)
    program, args = _program(model, (x,))
    assert any(kern.name.endswith("_pingpong") for kern in program.kernels)
    forced = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice="pingpong"))
    with pytest.raises(ProgramLoadError, match="written in Gluon, which runs on a GPU only"):
        forced(args)


@PLAIN_KERNELS_ONLY
def test_a_hopper_gluon_kernel_is_left_out_on_another_gpu():
    """The ping-pong kernel uses Hopper's wgmma: on a GPU of another compute capability the
    runtime does not compile it (its alternative loses at once, with the reason), on sm_90 it
    runs, and a Triton kernel is never held back."""
    from pipec_runtime_cudagraph.kernels import load_kernel
    from pipec_runtime_cudagraph.launch import gluon_cannot_run

    model = nn.Sequential(nn.Linear(64, 4352), nn.GELU()).to(torch.bfloat16).eval()
    program, _ = _program(model, (torch.randn(2048, 64, dtype=torch.bfloat16),))
    gluon = load_kernel(next(k for k in program.kernels if k.name.endswith("_pingpong")), interpret=False)
    triton_fn = load_kernel(next(k for k in program.kernels if "@triton.jit" in k.source), interpret=False)
    assert gluon_cannot_run(gluon, False, (9, 0)) is None
    assert "for Hopper (sm_90: wgmma); this GPU is sm_100" in gluon_cannot_run(gluon, False, (10, 0))
    assert "runs on a GPU only" in gluon_cannot_run(gluon, True, None)
    assert gluon_cannot_run(triton_fn, False, (8, 0)) is None


@pytest.mark.skipif(not GPU, reason="compiling for the GPU")
def test_gpu_first_call_compiles_every_alternative_at_once(caplog, monkeypatch):
    """The first call compiles the configs of every launch at once, the choice group's
    alternatives included (the template's candidates, the ping-pong kernel, the pointwise kernels
    after cuBLAS), before the steps run and time them; the results still agree with eager. (With
    nothing tuned before: a config chosen earlier, by this model or on disk, is the only one
    compiled; so no tuning cache, and no shipped tuning table, which has learned this shape.)"""
    model = nn.Sequential(nn.Linear(512, 4096), nn.GELU()).cuda().to(torch.bfloat16).eval()
    torch.manual_seed(0)
    x = torch.randn(4096, 512, device="cuda", dtype=torch.bfloat16)
    program, args = _program(model, (x,))
    runner = ProgramRunner(program, pipec_ir.CompileOptions(autotune=True).with_extra(tuning_table=False),
                           pipec_ir.LoadContext(tuning_cache=False))
    with caplog.at_level(logging.INFO, logger="pipec.tuning"), torch.no_grad():
        torch.testing.assert_close(runner(args)[0], model(x), atol=4e-2, rtol=2e-2)
    (line,) = [r.getMessage() for r in caplog.records if "at once" in r.getMessage()]
    configs, launches = (int(w) for w in re.findall(r"compiling (\d+) kernel configs of (\d+) launches", line)[0])
    template = next(k for k in program.kernels if "_pingpong" not in k.name and "BLOCK_K" in k.source)
    assert launches >= 3 and configs >= len(template.configs) + 2


@pytest.mark.skipif(not GPU, reason="bf16 products and the GPU's timing choice")
def test_unaligned_lm_head_trains_through_either_alternative():
    """A vocabulary of 30522 words (N, then K in the input's gradient and M in the weight's, not
    multiples of 8): each product is a choice between the template and cuBLAS on padded copies;
    whichever the runtime picks, the logits and both gradients match eager's."""
    torch.manual_seed(0)
    head = nn.Linear(256, 30522, bias=False).cuda().to(torch.bfloat16)
    twin = nn.Linear(256, 30522, bias=False).cuda().to(torch.bfloat16)
    twin.load_state_dict(head.state_dict())
    h = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    h2 = h.detach().clone().requires_grad_()
    compiled = pipec.compile(head)
    got = compiled(h)
    want = twin(h2)
    torch.testing.assert_close(got, want, atol=3e-2, rtol=2e-2)
    grad = torch.randn_like(got)
    got.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(h.grad, h2.grad, atol=6e-2, rtol=3e-2)
    torch.testing.assert_close(head.weight.grad, twin.weight.grad, atol=6e-2, rtol=3e-2)
