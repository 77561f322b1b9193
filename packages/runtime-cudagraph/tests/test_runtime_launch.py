"""The `launch` runtime on CPU through Triton's interpreter."""

from __future__ import annotations

import os
import stat

import pytest
import torch

from pipec_ir import (Buffer, CompileOptions, Device, Dtype, LaunchConfig, Program, Ref, Registry, Step,
                      make_attrs)
from runtime_helpers import T, add_program, dynamic_add_program, extern_program, slot_program

from pipec_runtime_cudagraph import interpreter_active, load_launch
from pipec_runtime_cudagraph.kernels import load_kernel

needs_cpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA behaviour")


@pytest.fixture()
def options():
    return CompileOptions(runtime="launch")


def test_pointwise_add(options):
    run = load_launch(add_program(100), options)
    x, y = torch.randn(100), torch.randn(100)
    (out,) = run([x, y])
    torch.testing.assert_close(out, x + y)


@needs_cpu
def test_interpreter_switched_on_without_cuda(options):
    load_launch(add_program(10), options)
    assert interpreter_active()
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_non_contiguous_inputs_are_made_contiguous(options):
    run = load_launch(add_program(100), options)
    x = torch.randn(200)[::2]
    y = torch.randn(100)
    (out,) = run([x, y])
    torch.testing.assert_close(out, x + y)


def test_reduction_and_shared_slots(options):
    run = load_launch(slot_program(8, 37), options)
    x = torch.randn(8, 37)
    t3, t2 = run([x])
    torch.testing.assert_close(t2, (x + x).sum(1))
    torch.testing.assert_close(t3, 2 * (x + x).sum(1))
    # t3 reuses slot 0 (t1's memory); t2 has slot 1 of its own
    assert t3.untyped_storage().data_ptr() != t2.untyped_storage().data_ptr()


def test_externs_views_and_repeated_outputs(options):
    run = load_launch(extern_program(), options)
    x, w, b = torch.randn(6, 5), torch.randn(7, 5), torch.randn(6, 7)
    out, xt, none, out2 = run([x, w, b])
    torch.testing.assert_close(out, x @ w.T + b)
    torch.testing.assert_close(xt, x.T)
    assert none is None
    assert out2 is out


def test_extern_dtype_device_kwargs_and_multi_result(options):
    prog = Program(
        name="ext2",
        inputs=(Buffer("x", T([4, 6])),),
        outputs=("ones", "values", "indices"),
        buffers=(Buffer("ones", T([2, 3], "float16")), Buffer("values", T([4])), Buffer("indices", T([4], "int64"))),
        kernels=(),
        steps=(
            Step("extern", "aten.full.default", (), ("ones",),
                 make_attrs(args=((2, 3), 1.5), kwargs=(("device", Device()), ("dtype", Dtype("float16"))))),
            Step("extern", "aten.max.dim", ("x",), ("values", "indices"), make_attrs(args=(Ref("x"), 1))),
        ),
    )
    run = load_launch(prog, options)
    x = torch.randn(4, 6)
    ones, values, indices = run([x])
    assert ones.dtype == torch.float16 and ones.device == x.device
    torch.testing.assert_close(ones, torch.full((2, 3), 1.5, dtype=torch.float16))
    torch.testing.assert_close(values, x.max(1).values)
    torch.testing.assert_close(indices, x.max(1).indices)


def test_dynamic_sizes(options):
    run = load_launch(dynamic_add_program(), options)
    for n in (3, 200):
        x, y = torch.randn(n), torch.randn(n)
        (out,) = run([x, y])
        torch.testing.assert_close(out, x + y)
    with pytest.raises(RuntimeError, match=r"dyn_add.*y.*shape"):
        run([torch.randn(5), torch.randn(6)])
    with pytest.raises(RuntimeError, match=r"s0=5000 is outside"):
        run([torch.randn(5000), torch.randn(5000)])


def test_interpreter_takes_the_first_config(options):
    bad = LaunchConfig(constants=(("BLOCK", 3),))  # not a power of two: would fail if used
    run = load_launch(add_program(50, configs=(LaunchConfig(constants=(("BLOCK", 32),)), bad)), options)
    x, y = torch.randn(50), torch.randn(50)
    torch.testing.assert_close(run([x, y])[0], x + y)


@pytest.mark.parametrize("dtype", ["float16", "int32"])
def test_other_dtypes(options, dtype):
    run = load_launch(add_program(33, dtype), options)
    x = torch.arange(33).to(getattr(torch, dtype))
    torch.testing.assert_close(run([x, x])[0], x + x)


def test_outputs_not_aliased_across_calls(options):
    run = load_launch(slot_program(4, 10), options)
    x1, x2 = torch.randn(4, 10), torch.randn(4, 10)
    a3, a2 = run([x1])
    b3, b2 = run([x2])
    assert a3.data_ptr() != b3.data_ptr()
    torch.testing.assert_close(a2, (x1 + x1).sum(1))
    torch.testing.assert_close(b2, (x2 + x2).sum(1))


def test_input_validation_errors(options):
    run = load_launch(add_program(10), options)
    x = torch.randn(10)
    with pytest.raises(RuntimeError, match=r"add_prog.*expected 2 inputs \(x, y\), got 1"):
        run([x])
    with pytest.raises(RuntimeError, match=r"add_prog.*input 1 \(y\) has shape \(11,\), expected \(10,\)"):
        run([x, torch.randn(11)])
    with pytest.raises(RuntimeError, match=r"add_prog.*input 0 \(x\) has dtype float64, expected float32"):
        run([x.double(), x])
    with pytest.raises(RuntimeError, match=r"input 1 \(y\) is a int"):
        run([x, 3])
    try:
        run([x])
    except RuntimeError as e:
        assert "\n" not in str(e)


def test_unknown_extern_is_a_clear_error(options):
    prog = Program(name="bad", inputs=(Buffer("x", T([2])),), outputs=("y",), buffers=(Buffer("y", T([2])),),
                   kernels=(), steps=(Step("extern", "aten.no_such_op.default", ("x",), ("y",),
                                           make_attrs(args=(Ref("x"),))),))
    with pytest.raises(RuntimeError, match="aten.no_such_op.default"):
        load_launch(prog, options)


def test_wrong_pointer_arity_is_a_clear_error(options):
    prog = add_program(10)
    prog = Program(name=prog.name, inputs=prog.inputs, outputs=prog.outputs, buffers=prog.buffers,
                   kernels=prog.kernels, steps=(Step("launch", "pipec_add_0", ("x",), ("out",)),))
    with pytest.raises(RuntimeError, match="3 pointer arguments"):
        load_launch(prog, options)


def test_kernel_sources_cached_privately(tmp_path):
    d = tmp_path / "kc"
    kernel = add_program(4).kernels[0]
    fn = load_kernel(kernel, cache_dir=d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    files = [p for p in d.iterdir() if p.suffix == ".py"]  # __pycache__ may sit beside them
    assert len(files) == 1 and files[0].suffix == ".py" and files[0].read_text() == kernel.source
    assert load_kernel(kernel, cache_dir=d) is fn


def test_kernel_without_its_function_is_a_clear_error(tmp_path):
    from pipec_runtime_cudagraph.kernels import KernelLoadError

    kernel = add_program(4).kernels[0]
    broken = type(kernel)(name="missing", source=kernel.source, args=kernel.args, sizes=kernel.sizes,
                          grid=kernel.grid, configs=kernel.configs)
    with pytest.raises(KernelLoadError, match="missing"):
        load_kernel(broken, cache_dir=tmp_path)


def test_empty_tensors(options):
    prog = add_program(0)
    run = load_launch(prog, options)
    (out,) = run([torch.empty(0), torch.empty(0)])
    assert out.shape == (0,)


def test_plugin_registers_both_runtimes():
    from pipec_runtime_cudagraph import plugin

    registry = Registry()
    plugin.pipec_register(registry)
    assert set(registry.names("runtime")) == {"launch", "cudagraph"}
    import importlib.metadata

    try:
        importlib.metadata.version("pipec-runtime-cudagraph")
    except importlib.metadata.PackageNotFoundError:
        return  # running from a source tree (PYTHONPATH): no distribution to name
    assert registry.entry("runtime", "launch").distribution == "pipec-runtime-cudagraph"


def test_symbolic_slot_sizes(options):
    from pipec_ir import Slot, SymbolRange
    from pipec_ir.symbolic import size_symbol

    s0 = size_symbol("s0")
    prog = dynamic_add_program()
    prog = Program(name="dyn_slot", inputs=prog.inputs, outputs=("out",),
                   buffers=(Buffer("t", T([s0]), slot=0), Buffer("out", T([s0]))),
                   kernels=prog.kernels,
                   steps=(Step("launch", "pipec_add_dyn_0", ("x", "y"), ("t",)),
                          Step("launch", "pipec_add_dyn_0", ("t", "t"), ("out",))),
                   slots=(Slot(0, 4 * s0),), symbols=(SymbolRange("s0", 2, None, 8),),
                   peak_bytes=4 * s0)
    run = load_launch(prog, options)
    for n in (7, 129):
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(run([x, y])[0], 2 * (x + y))


def test_reduction_when_triton_was_imported_before_the_interpreter(tmp_path):
    """triton.language's library functions (tl.sum) decorated in compiled mode still work."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import os
        os.environ.pop("TRITON_INTERPRET", None)
        import triton, triton.language as tl  # before the runtime switches the interpreter on
        import torch
        from runtime_helpers import slot_program
        from pipec_ir import CompileOptions, LoadContext
        from pipec_runtime_cudagraph import load_launch
        run = load_launch(slot_program(), CompileOptions(), LoadContext(kernel_dir={str(tmp_path)!r}))
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        x = torch.randn(8, 37, device=dev)
        t3, t2 = run([x.cpu()])
        torch.testing.assert_close(t2, (x.cpu() * 2).sum(1))
        print("ok")
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout


@pytest.mark.parametrize("make", [add_program, slot_program, extern_program, dynamic_add_program])
def test_specialized_run_matches_the_general_path(options, make):
    prog = make()
    run = load_launch(prog, options)
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # CPU inputs on a CUDA machine are moved: no fast path
    inputs = [torch.randn(*[int(d) if d.is_number else 9 for d in b.type.shape], device=dev) for b in prog.inputs]
    general = run(inputs)
    assert len(run.specialized) == 1, "the first call builds the specialized run for its sizes"
    source = next(iter(run.specialized.values()))[1].source
    assert "{" not in source  # no per-call dictionaries: values are locals
    again = run(inputs)
    for g, s in zip(general, again):
        assert (g is None and s is None) or torch.equal(g, s)


def test_specialized_run_guards_take_the_general_path(options):
    run = load_launch(add_program(20), options)
    x, y = torch.randn(20), torch.randn(20)
    run([x, y])
    torch.testing.assert_close(run([x[::2].repeat(2), y])[0], x[::2].repeat(2) + y)
    torch.testing.assert_close(run([x.view(4, 5).t().reshape(20), y])[0], x.view(4, 5).t().reshape(20) + y)
    nc = torch.randn(40)[::2]  # not contiguous: the general path copies it
    torch.testing.assert_close(run([nc, y])[0], nc + y)
    with pytest.raises(RuntimeError, match="has dtype float64, expected float32"):
        run([x.double(), y])
    with pytest.raises(RuntimeError, match="expected 2 inputs"):
        run([x])


def test_one_c_check_vouches_for_inputs_like_those_the_run_accepted(options):
    """The specialized run's Python checks run only where one C call (Dynamo's TensorGuards) says
    the inputs differ from those the checks last passed (input_guard.py); what it rejects still
    gets the Python checks, and what those pass is remembered."""
    from pipec_runtime_cudagraph.input_guard import LEARN_LIMIT, InputGuard, TensorGuards

    if TensorGuards is None:
        pytest.skip("this torch has no Dynamo C guards")
    run = load_launch(add_program(20), options)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # CPU inputs on a CUDA machine are moved: no fast path
    x, y = torch.randn(20, device=dev), torch.randn(20, device=dev)
    run([x, y])  # the general path, which builds the specialized run
    run([x, y])  # the specialized run: its Python checks pass, and the C check learns the inputs
    fn = next(iter(run.specialized.values()))[1]
    assert ".same(inputs)" in fn.source
    (guard,) = [v for v in fn.__globals__.values() if isinstance(v, InputGuard)]
    assert guard.same([torch.randn(20, device=dev), y]), "the same properties: no Python checks"
    assert not guard.same([x.double(), y]) and not guard.same([torch.randn(40, device=dev)[::2], y])
    grad = x.detach().requires_grad_(True)  # C check: differs; Python checks: pass, and it is learned
    assert not guard.same([grad, y])
    assert run._run_specialized([grad, y]) is not None
    assert guard.same([grad, y])
    torch.testing.assert_close(run([grad.detach(), y])[0], x + y)
    assert run._run_specialized([x.double(), y]) is None, "the Python checks still reject it"
    for _ in range(LEARN_LIMIT):  # inputs that keep changing in what only the C check reads
        run._run_specialized([x.detach().requires_grad_(True), y])
        run._run_specialized([x, y])
    assert not guard.same([x, y]), "no more rebuilds: the Python checks alone"
    torch.testing.assert_close(run([x, y])[0], x + y)


def test_a_non_contiguous_input_is_specialized_on_its_strides(options):
    """A backward graph gets its saved tensors with the same (non-contiguous) layout every call:
    the specialized run guards on those strides and copies the input, as the general path does;
    a contiguous input of the same sizes fails that guard and takes the general path."""
    run = load_launch(add_program(20), options)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # CPU inputs on a CUDA machine are moved: no fast path
    y = torch.randn(20, device=dev)
    nc = torch.randn(40, device=dev)[::2]
    torch.testing.assert_close(run([nc, y])[0], nc + y)
    source = next(iter(run.specialized.values()))[1].source
    assert ".stride() !=" in source and ".contiguous()" in source
    other = torch.randn(40, device=dev)[1::2]
    assert run._run_specialized([other, y]) is not None, "same strides: the specialized run"
    torch.testing.assert_close(run([other, y])[0], other + y)
    x = torch.randn(20, device=dev)
    assert run._run_specialized([x, y]) is None, "contiguous: the guard sends it to the general path"
    torch.testing.assert_close(run([x, y])[0], x + y)


def test_inputs_no_kernel_reads_pass_with_their_strides(options):
    """`x` and `w` reach only library calls and views: they are used as the caller's tensors,
    transposed or not, in the general and the specialized run; `b`, read by a kernel, is made
    contiguous."""
    from runtime_helpers import extern_program

    run = load_launch(extern_program(), options)
    assert run.dense_inputs == {2}
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # CPU inputs on a CUDA machine are moved: no fast path
    torch.manual_seed(0)
    for call in range(3):  # general, then specialized twice
        x, w = torch.randn(5, 6, device=dev).t(), torch.randn(5, 7, device=dev).t()
        b = torch.randn(7, 6, device=dev).t()
        out, xt, _, _ = run([x, w, b])
        torch.testing.assert_close(out, x @ w.t() + b)
        assert torch.equal(xt, x.t())
        assert xt.data_ptr() == x.data_ptr(), f"call {call}: x was copied"
    assert run.specialized


def test_launch_hooks_are_seen_only_when_set():
    """Triton >= 3.5 keeps an empty `HookChain` in the launch-hook knobs: that is no hook
    (the fast launch path stays on); a profiler's hook in the chain turns it off."""
    from pipec_runtime_cudagraph.fastlaunch import hooks_active

    knobs = pytest.importorskip("triton.knobs")
    assert not hooks_active()
    chain = knobs.runtime.launch_enter_hook
    if not hasattr(chain, "add"):  # an older Triton: a plain attribute
        knobs.runtime.launch_enter_hook = lambda *a: None
        try:
            assert hooks_active()
        finally:
            knobs.runtime.launch_enter_hook = None
        return

    def hook(*args):
        return None

    chain.add(hook)
    try:
        assert hooks_active()
    finally:
        chain.remove(hook)
    assert not hooks_active()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_calls_take_the_specialized_path(options):
    run = load_launch(slot_program(), options)
    x = torch.randn(8, 37, device="cuda")
    want = run([x])
    assert run.specialized, "the first call builds the specialized run"
    assert run._run_specialized([x]) is not None, "the next call runs it (no launch hooks set)"
    for a, b in zip(want, run([x])):
        assert torch.equal(a, b)


def test_outputs_to_caller_keep_eager_aliasing():
    """CPU tensors on a CUDA machine: outputs come back with the aliasing eager gives (checked here
    with CPU "device copies"; the copy back is the same code)."""
    import torch

    from pipec_runtime_cudagraph.launch import outputs_to_caller

    x = torch.arange(12.0)
    moved = [x.clone()]
    y = torch.arange(6.0) * 2
    outs = [moved[0], moved[0].view(3, 4)[1], y, y.view(2, 3), torch.empty(0), None]
    back = outputs_to_caller(outs, moved, [x])
    assert back[0] is x and back[5] is None
    assert back[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    torch.testing.assert_close(back[1], x.view(3, 4)[1])
    back[2].add_(1)  # the two views of one result share storage, as in eager
    torch.testing.assert_close(back[3], back[2].view(2, 3))
    assert back[4].shape == (0,)


def test_specialized_run_drops_a_multi_output_externs_result_tuple(options):
    """var_mean's (var, mean) tuple is dropped once unpacked: held, it would keep each result
    alive past its own release (attention's output held through a whole MLP)."""
    from runtime_helpers import add_kernel

    prog = Program(
        name="var_mean", inputs=(Buffer("x", T([4, 6])),), outputs=("out",),
        buffers=(Buffer("v", T([4])), Buffer("m", T([4])), Buffer("out", T([4]))),
        kernels=(add_kernel("pipec_add_vm", 4),),
        steps=(Step("extern", "aten.var_mean.correction", ("x",), ("v", "m"),
                    make_attrs(args=(Ref("x"), [1]), kwargs=(("correction", 1),))),
               Step("launch", "pipec_add_vm", ("v", "m"), ("out",))))
    run = load_launch(prog, options)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # CPU inputs on a CUDA machine are moved: no fast path
    x = torch.randn(4, 6, device=dev)
    for _ in range(2):
        torch.testing.assert_close(run([x])[0], x.var(1) + x.mean(1))
    source = next(iter(run.specialized.values()))[1].source
    call = next(line for line in source.splitlines() if "_r = E" in line)
    assert call.rstrip().endswith("_r = None")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_cpu_inputs_beside_gpu_inputs_move_to_the_gpu(options):
    """As ATen does for an index tensor or a scalar on the CPU next to CUDA tensors."""
    run = load_launch(add_program(20), options)
    x, y = torch.randn(20, device="cuda"), torch.randn(20)
    for a, b in ((x, y), (y, x)):
        out = run([a, b])[0]
        assert out.device.type == "cuda"
        torch.testing.assert_close(out.cpu(), x.cpu() + y)


def test_kernel_dir_comes_from_the_load_context_not_the_environment(monkeypatch, tmp_path):
    """The runtime reads no environment variable: the front end turns $PIPEC_KERNEL_DIR into the
    LoadContext's kernel_dir (packages/cli's make_load_context), which moves kernel sources and
    tuning results."""
    from pipec_ir import LoadContext
    from pipec_runtime_cudagraph.kernels import kernel_cache_dir
    from pipec_runtime_cudagraph.launch import ProgramRunner

    monkeypatch.setenv("PIPEC_KERNEL_DIR", str(tmp_path / "k"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kernel_cache_dir() == tmp_path / "home" / ".cache" / "pipec" / "kernels"
    assert not (tmp_path / "k").exists()
    assert kernel_cache_dir(tmp_path / "o") == tmp_path / "o"
    runner = ProgramRunner(add_program(10), CompileOptions(), LoadContext(kernel_dir=str(tmp_path / "o")))
    assert runner.tuning_cache.directory == tmp_path / "o" / "tuning"
    assert list((tmp_path / "o").glob("*.py"))  # the kernel's source


def test_a_failed_async_compile_does_not_leave_triton_in_async_mode():
    """triton < 3.7's AsyncCompileMode.__exit__ cleared the mode only after every compile succeeded;
    pipec clears it itself, and only when the mode is still its own."""
    from pipec_runtime_cudagraph.autotune import leave_async_mode

    _async_compile = pytest.importorskip("triton.runtime._async_compile")
    ours, other = object(), object()
    token = _async_compile.active_mode.set(ours)
    try:
        leave_async_mode(ours)
        assert _async_compile.active_mode.get() is None
        _async_compile.active_mode.set(other)
        leave_async_mode(ours)  # someone else's mode is left alone
        assert _async_compile.active_mode.get() is other
    finally:
        _async_compile.active_mode.reset(token)


def _binding_cases():
    import torch

    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)
    a, b, m3 = r(4, 6), r(6, 5), r(2, 4, 6)
    return {
        "aten.mm.default": ((a, b), {}),
        "aten.bmm.default": ((m3, r(2, 6, 3)), {}),
        "aten.addmm.default": ((r(5), a, b), {"beta": 0.5, "alpha": 2.0}),
        "aten.baddbmm.default": ((r(2, 4, 3), m3, r(2, 6, 3)), {"beta": 1.0, "alpha": 0.25}),
        "aten._addmm_activation.default": ((r(5), a, b), {"beta": 1.0, "alpha": 1.0, "use_gelu": False}),
        "aten.permute.default": ((m3, [2, 0, 1]), {}),
        "aten.reshape.default": ((m3.permute(1, 0, 2), [4, 12]), {}),  # copies: not a view
        "aten.t.default": ((a,), {}),
        "aten.transpose.int": ((m3, 0, 2), {}),
        "aten.unsqueeze.default": ((a, 1), {}),
        "aten.squeeze.dim": ((r(4, 1, 3), 1), {}),
        "aten.select.int": ((m3, 1, 2), {}),
        "aten.narrow.default": ((m3, 2, 1, 3), {}),
        "aten.as_strided.default": ((a, [3, 2], [1, 6], 1), {}),
        "aten.clone.default": ((m3.transpose(0, 1),), {"memory_format": torch.contiguous_format}),
        "aten.cat.default": (([a, r(2, 6)], 0), {}),
        "aten.view.default": ((m3, [8, 6]), {}),
        "aten.expand.default": ((r(4, 1), [4, 7]), {"implicit": False}),
        # grouped, strided and padded, with a bias: the arguments ResNet's and ConvNeXt's carry
        "aten.convolution.default": ((r(2, 4, 7, 7), r(6, 2, 3, 3), r(6), [2, 2], [1, 1], [1, 1], False, [0, 0], 2),
                                     {}),
    }


def test_every_python_binding_computes_its_overload():
    """A specialized run calls these ATen overloads through torch's Python bindings
    (extern_ops.PYTHON_BINDINGS): with the overload's arguments, each returns the same values
    in the same layout, a view where the overload returns a view."""
    import torch

    from pipec_runtime_cudagraph.extern_ops import PYTHON_BINDINGS
    from pipec_runtime_cudagraph.steps import resolve_target

    cases = _binding_cases()
    assert set(cases) == set(PYTHON_BINDINGS), "every binding needs a case"
    for target, (args, kwargs) in cases.items():
        want = resolve_target(target)(*args, **kwargs)
        got = PYTHON_BINDINGS[target](*args, **kwargs)
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=target)
        assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset(), target
        assert (got._base is not None) == (want._base is not None), target


def test_a_specialized_run_calls_the_python_binding(options, tmp_path):
    """extern_program's mm goes through `torch.mm` in the specialized run's namespace."""
    from pipec_ir import LoadContext

    run = load_launch(extern_program(), options, LoadContext(kernel_dir=str(tmp_path)))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args = [torch.randn(tuple(int(d) for d in b.type.shape), device=device) for b in extern_program().inputs]
    first = run(args)
    second = run(args)
    for x, y in zip(first, second):
        torch.testing.assert_close(x, y)
    [(_, specialized)] = run.specialized.values()
    assert torch.mm in specialized.__globals__.values()


def test_an_output_viewing_the_runs_own_buffer_is_reinterpreted(options, tmp_path):
    """A returned view of a buffer the caller never sees is made by `_reinterpret_tensor` (no
    autograd view, which AOTAutograd would detach once more per saved tensor); a returned view of
    an input stays an ATen view of the caller's tensor."""
    from pipec_ir import LoadContext

    prog = Program(
        name="views_out", inputs=(Buffer("x", T([2, 4])),), outputs=("av", "xt"),
        buffers=(Buffer("a", T([2, 4])), Buffer("av", T([4, 2])), Buffer("xt", T([4, 2]))),
        kernels=(add_program(8).kernels[0],),
        steps=(Step("launch", "pipec_add_0", ("x", "x"), ("a",)),
               Step("extern", "aten.permute.default", ("a",), ("av",), make_attrs(args=(Ref("a"), (1, 0)))),
               Step("extern", "aten.permute.default", ("x",), ("xt",), make_attrs(args=(Ref("x"), (1, 0))))))
    run = load_launch(prog, options, LoadContext(kernel_dir=str(tmp_path)))
    x = torch.randn(2, 4, device="cuda" if torch.cuda.is_available() else "cpu")
    for _ in range(2):  # general path, then the specialized one
        av, xt = run([x])
        torch.testing.assert_close(av, (x + x).t())
    assert run.specialized, "the second call ran specialized"
    assert not av._is_view() and xt._is_view() and xt._base is x


def test_an_extern_scatter_gets_its_expanded_cpu_index_materialized():
    """scatter_reduce "prod" stays an extern call (no atomic multiply). Its index may be an
    expanded view (strides with zeros), which torch 2.13's CPU kernel misplaced (tests/test_fuzz.py):
    the runtime's guarded call passes it contiguous, with the result of a dense index."""
    import torch

    from pipec_runtime_cudagraph.extern_ops import DenseIndexCall, guarded

    op = torch.ops.aten.scatter_reduce.two
    call = guarded("aten.scatter_reduce.two", op)
    assert isinstance(call, DenseIndexCall) and guarded("aten.mm.default", torch.ops.aten.mm.default) is not call
    g = torch.Generator().manual_seed(0)
    x, src = torch.randn(4, 2, 8, generator=g), torch.randn(3, 2, 8, generator=g)
    index = torch.randint(0, 4, (3, 1, 1), generator=g).expand(3, 2, 8)
    assert 0 in index.stride()
    got = call(x, 0, index, src, "prod")
    torch.testing.assert_close(got, op(x, 0, index.contiguous(), src, "prod"), rtol=0, atol=0)
