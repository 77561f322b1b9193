"""The `cudagraph` runtime's variants (pinned inputs, outputs handed out without a copy, double
buffers, the private copying variant), on the CPU: the capture is simulated by a graph that
reads pinned inputs by address only (it checks that every replay finds them there) and writes
its outputs at fixed addresses, as a CUDA Graph does."""

from __future__ import annotations

import gc
import warnings

import pytest
import sympy
import torch

from pipec_ir import Buffer, CompileOptions, Program, Step
from runtime_helpers import T, add_kernel, add_program, extern_program

from pipec_runtime_cudagraph import cudagraph
from pipec_runtime_cudagraph.buckets import PadPolicy
from pipec_runtime_cudagraph.cudagraph import MAX_RECORDS, MAX_SHARED, CudaGraphProgram


class FakeGraph:
    """A recorded graph on the CPU: replays run the program again on the inputs of the call
    being served (pinned ones, checked to be at the recorded address) or on the graph's own
    buffers, and copy the results into the outputs captured at record time."""

    current: list = []  # the inputs of the call in progress (set by `Sim.__call__`)

    def __init__(self, runner, graph_inputs, values, device):
        self.runner, self.values, self.device = runner, values, device
        self.pinned = {i: t.data_ptr() for i, t in enumerate(graph_inputs)
                       if i < len(FakeGraph.current) and t is FakeGraph.current[i]}
        self.buffers = {i: t for i, t in enumerate(graph_inputs) if i not in self.pinned}
        self.outputs = runner.run(graph_inputs, values, device)
        self.replays = 0

    def replay(self):
        self.replays += 1
        inputs = []
        for i in range(len(self.runner.program.inputs)):
            if i in self.pinned:
                x = FakeGraph.current[i]
                assert x.data_ptr() == self.pinned[i], "replayed with a pinned input somewhere else"
                inputs.append(x)
            else:
                inputs.append(self.buffers[i])
        for dst, src in zip(self.outputs, self.runner.run(inputs, self.values, self.device)):
            if dst is not None and dst.data_ptr() != src.data_ptr():  # a view of an input is one already
                dst.copy_(src)


class Sim:
    """A CudaGraphProgram whose graphs are `FakeGraph`s, on the CPU."""

    def __init__(self, program: Program, options: CompileOptions):
        self.prog = CudaGraphProgram(program, options)
        self.prog.device_type = "cpu"
        self.graphs: list[FakeGraph] = []
        self.records: list[tuple[int, FakeGraph | None]] = []  # each capture's (warm-up runs, pool's graph)
        self.fail_unwarmed = None  # what a capture without warm-up raises (None: nothing)
        self.general = 0
        general = self.prog._call

        def counting_call(inputs):
            self.general += 1
            return general(inputs)

        def record_graph(inputs, own, values, device, warmups, share=None):
            self.records.append((warmups, share))
            if self.fail_unwarmed and not warmups:
                raise type(self.fail_unwarmed)(*self.fail_unwarmed.args)  # a new one: no traceback kept
            graph_inputs, buffers = self.graph_inputs(inputs, own, values)
            g = FakeGraph(self.prog.runner, graph_inputs, values, device)
            self.graphs.append(g)
            return g, g.outputs, buffers

        self.prog._call = counting_call
        self.prog._record_graph = record_graph

    def graph_inputs(self, inputs: list, own: list, values: tuple) -> tuple[list, dict]:
        """A record's inputs as its capture reads them: the pinned ones, and buffers (filled) for `own`."""
        buffers = {i: self.prog.padding.padded_input(i, inputs[i], values) for i in own}
        return [buffers.get(i, t) for i, t in enumerate(inputs)], buffers

    def __call__(self, inputs):
        FakeGraph.current = list(inputs)
        try:
            return self.prog(inputs)
        finally:
            FakeGraph.current = []

    def slot(self):
        (slot,) = self.prog.graphs.entries.values()
        return slot


@pytest.fixture(autouse=True)
def _cpu_device(monkeypatch):
    monkeypatch.setattr(cudagraph, "_current_device", lambda: -1)


@pytest.fixture()
def options():
    return CompileOptions(runtime="cudagraph")


def test_same_inputs_dropped_outputs_no_copy_no_clone(options):
    """A model called on the same tensors, its outputs dropped each time (a benchmark loop): the
    second call records a graph that reads both inputs in place, and every later call replays it
    through the generated fast path with no input copy and no output copy."""
    run = Sim(add_program(50), options)
    x, y = torch.randn(50), torch.randn(50)
    ptrs = []
    for k in range(6):
        if k == 4:
            x.mul_(3)  # the caller refills its tensor: the replay reads it where it is
        (out,) = run([x, y])
        torch.testing.assert_close(out, x + y)
        ptrs.append(out.data_ptr())
        del out
    (variant,) = run.slot().shared
    assert variant.pinned.keys() == {0, 1} and not variant.buffers
    assert len(run.graphs) == 2  # the first graph copied its inputs: the second one replaced it
    assert len(set(ptrs[1:])) == 1  # outputs alias the graph's memory: no copy
    assert run.general == 2  # every call after the second took the fast path


def test_held_outputs_alternate_between_two_graphs(options):
    """`y = model(x)`: the last output is still held during the next call, so the key alternates
    between two graphs; no output the caller holds is ever overwritten."""
    run = Sim(add_program(40), options)
    x, y = torch.randn(40), torch.randn(40)
    ys = [y + k for k in range(8)]  # all alive: a new address each call (one reused would be pinned)
    prev = None
    for k in range(8):
        (out,) = run([x, ys[k]])
        torch.testing.assert_close(out, x + y + k)
        if prev is not None:
            torch.testing.assert_close(prev, x + y + k - 1)  # the previous output survived the replay
            assert prev.data_ptr() != out.data_ptr()
        prev = out
    assert len(run.slot().shared) == MAX_SHARED
    assert run.slot().records == 3  # copying inputs, then two reading them in place
    assert run.general == 3  # then the fast path alternates by itself


def test_outputs_kept_in_a_list_are_copied_with_one_warning(options):
    run = Sim(add_program(30), options)
    x, y = torch.randn(30), torch.randn(30)
    kept = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(7):
            kept.append(run([x, y * k])[0])
    for k, out in enumerate(kept):
        torch.testing.assert_close(out, x + y * k)
    assert len({t.data_ptr() for t in kept}) == len(kept)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "still holds outputs" in msgs[0] and "copies" in msgs[0]
    assert run.slot().private is not None


def test_fresh_inputs_each_call(options):
    run = Sim(add_program(64), options)
    outs = []
    for k in range(6):
        x, y = torch.full((64,), float(k)), torch.randn(64)
        (out,) = run([x, y])
        torch.testing.assert_close(out, x + y)
        outs.append((out, x + y))
        if k % 2:
            outs.clear()
    for out, want in outs:
        torch.testing.assert_close(out, want)
    assert run.slot().records <= MAX_RECORDS


def test_output_fed_back_as_input(options):
    """`x = f(x, y)`: each call reads the previous one's output; two graphs (both reading `y` in
    place) alternate, copying `x`, without recording a graph per call."""
    run = Sim(add_program(16), options)
    x, y = torch.zeros(16), torch.randn(16)
    records = []
    for k in range(1, 11):
        (x,) = run([x, y])
        torch.testing.assert_close(x, k * y)
        records.append(run.slot().records)
    assert records[3] == records[-1] == 3 and run.slot().private is None
    assert [g.pinned.keys() for g in run.slot().shared] == [{1}, {1}]
    assert run.general == 3


def test_views_of_pinned_inputs_are_rebuilt_from_the_call(options):
    """extern_program returns `x.T`: once `x` is pinned, the output is a view of the caller's own
    tensor, and the graph keeps no reference to it."""
    run = Sim(extern_program(), options)
    x, w, b = torch.randn(6, 5), torch.randn(7, 5), torch.randn(6, 7)
    for k in range(4):
        out, xt, none, out2 = run([x, w, b])
        torch.testing.assert_close(out, x @ w.T + b)
        assert out2 is out and none is None
        assert xt.shape == (5, 6) and torch.equal(xt, x.T)
        assert (xt.data_ptr() == x.data_ptr()) == (k > 0)  # first call: a view of the graph's own copy
    for variant in run.slot().shared:  # two: the caller held the last outputs at each call
        assert variant.pinned.keys() == {0, 1, 2}
        assert isinstance(variant.outputs[1], cudagraph.InputView)
        assert all(not isinstance(t, torch.Tensor) or t.untyped_storage().data_ptr() != x.data_ptr()
                   for t in variant.outputs)


def chain(n=24):
    """in -> in + in: the second program of a chain reads the first one's output."""
    return Program(name="double", inputs=(Buffer("x", T([n])),), outputs=("out",),
                   buffers=(Buffer("out", T([n])),), kernels=(add_kernel("pipec_add_c", n),),
                   steps=(Step("launch", "pipec_add_c", ("x", "x"), ("out",)),))


def test_outputs_of_another_graph_are_read_in_place(options):
    """Program B reads program A's output (a graph break, a backward reading saved activations):
    pinned at first sight, no copy; A's graph is free again once the caller drops B's input."""
    a, b = Sim(add_program(24), options), Sim(chain(24), options)
    x, y = torch.randn(24), torch.randn(24)
    for _ in range(5):
        (h,) = a([x, y])
        (out,) = b([h])
        del h
        torch.testing.assert_close(out, 2 * (x + y))
        del out
    va, vb = a.slot().shared[0], b.slot().shared[0]  # the ones used last
    assert va.pinned.keys() == {0, 1} and vb.pinned.keys() == {0} and not vb.buffers
    assert b.slot().records == 2  # one per graph of `a` it read from (a's first one was replaced)
    assert b.general == 2 and not va.held()


def test_padded_bucket_copies_into_the_prefix(options, monkeypatch):
    from test_runtime_buckets import tunable_add  # pad_symbols=("s0",)

    run = Sim(tunable_add(), options.with_extra(autotune=False))
    for n in (17, 20, 17, 32, 20):
        x, y = torch.randn(n), torch.randn(n)
        (out,) = run([x, y])
        assert out.shape == (n,)
        torch.testing.assert_close(out, x + y)
        del out
    assert len(run.prog.graphs) == 1


def test_storage_use_count_sees_views_the_caller_makes(options):
    """What `held` relies on: every tensor or view the caller keeps on an output counts, the
    runtime's own references do not."""
    run = Sim(add_program(8), options)
    x, y = torch.randn(8), torch.randn(8)
    (out,) = run([x, y])
    (g,) = run.slot().shared
    assert g.held()
    v = out[2:]
    del out
    assert g.held()
    del v
    assert not g.held()


def test_pad_policy_padded_input_is_a_fresh_copy(options):
    from test_runtime_buckets import tunable_add

    pad = PadPolicy(CudaGraphProgram(tunable_add(), options).runner, "pow2")
    x = torch.randn(5)
    buf = pad.padded_input(0, x, (8,))
    assert buf.shape == (8,) and torch.equal(buf[:5], x) and not buf[5:].any()
    same = pad.padded_input(0, x, (5,))
    assert torch.equal(same, x) and same.data_ptr() != x.data_ptr()
    assert sympy.Integer(8) == buf.shape[0]


def test_parameters_are_pinned_from_the_first_call(options):
    run = Sim(add_program(12), options)
    w = torch.nn.Parameter(torch.randn(12), requires_grad=False)
    x = torch.randn(12)
    torch.testing.assert_close(run([x, w])[0], x + w)
    (g,) = run.slot().shared
    assert g.pinned.keys() == {1} and g.buffers.keys() == {0}
    with torch.no_grad():
        w.mul_(2)  # an optimizer's in-place update: the next replay reads it
    torch.testing.assert_close(run([x, w])[0], x + w)
    w2 = torch.nn.Parameter(torch.randn(12), requires_grad=False)
    torch.testing.assert_close(run([x, w2])[0], x + w2)  # moved: a graph pinned at the new address
    assert any(g.pinned.get(1, (None,))[0] == w2.data_ptr() for g in run.slot().shared)


def test_past_every_record_limit_calls_run_as_launches(options, monkeypatch):
    monkeypatch.setattr(cudagraph, "MAX_PRIVATE", 1)
    run = Sim(add_program(10), options)
    y = torch.randn(10)
    params = [torch.nn.Parameter(torch.randn(10), requires_grad=False) for _ in range(MAX_RECORDS + 3)]
    kept = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for w in params:  # a parameter at a new address each call, every output kept
            (out,) = run([y, w])
            kept.append((out, y + w))
    for out, want in kept:
        torch.testing.assert_close(out, want)
    slot = run.slot()  # two graphs whose outputs the caller keeps, one copying: the rest ran as launches
    assert slot.records == MAX_SHARED and slot.private_records == 1 and len(run.graphs) == 3
    assert len([w for w in caught if "still holds outputs" in str(w.message)]) == 1


def test_moved_static_inputs_re_record_up_to_their_limit(options, monkeypatch):
    """A parameter at a new address every call (outputs dropped): graphs are recorded up to
    MAX_RECORDS, then each move replaces a graph (re-records, as Inductor's CUDA Graph trees do)
    up to MAX_STATIC_MOVES; past that the calls run as launches, with one warning saying why.
    None of it copies outputs: the caller holds none."""
    monkeypatch.setattr(cudagraph, "MAX_STATIC_MOVES", 3)
    run = Sim(add_program(10), options)
    y = torch.randn(10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        params = [torch.nn.Parameter(torch.randn(10), requires_grad=False)  # all alive: new addresses
                  for _ in range(MAX_RECORDS + 3 + 2)]
        for w in params:
            torch.testing.assert_close(run([y, w])[0], y + w)
    slot = run.slot()
    assert slot.records == MAX_RECORDS + 3 and slot.moves == 3 and slot.private_records == 0
    assert len(slot.shared) <= MAX_SHARED and len(run.graphs) == MAX_RECORDS + 3
    messages = [str(w.message) for w in caught if "cudagraph runtime" in str(w.message)]
    assert len(messages) == 1 and "static inputs (parameters, tensors marked static) moved 3 times" in messages[0]


def test_a_re_record_at_a_new_static_input_compiles_no_new_replay_source(options, monkeypatch):
    """A new static input each round, the old one gone (a decoder's new KV cache per `generate`):
    every round re-records and drops the variants pinning gone inputs, and the replay function
    generated for it has the text of the last one (addresses are namespace constants), so its
    source is compiled a few times, not per round."""
    from pipec_runtime_cudagraph import pysource

    compiled: list[str] = []

    def counting_compile(code, filename, mode):
        compiled.append(filename)
        return compile(code, filename, mode)

    monkeypatch.setattr(pysource, "compile", counting_compile, raising=False)
    pysource.compiled_code.cache_clear()
    run = Sim(add_program(10), options)
    y = torch.randn(10)
    sources = []
    w = None
    for _ in range(MAX_RECORDS + 3):
        # made while the last round's is alive, so at another address (an allocator may hand a
        # freed block straight back), which is then gone
        w = torch.nn.Parameter(torch.randn(10), requires_grad=False) if w is None else \
            torch.nn.Parameter(torch.randn(10) + 0 * w.detach(), requires_grad=False)
        gc.collect()  # gone for sure: nothing of an earlier test's cycles keeps the last one
        for _ in range(3):  # the first call records, the others replay on the fast path
            torch.testing.assert_close(run([y, w])[0], y + w)
        (replay,) = run.prog.replays.values()
        sources.append(replay.source)
    slot = run.slot()
    assert slot.moves >= 3 and slot.private_records == 0 and len(run.graphs) == slot.records
    replays = [f for f in compiled if "replay" in f]
    assert len(set(sources[1:])) == 1 and len(replays) <= 3, (len(set(sources)), replays)  # of 9 rounds
    assert len(slot.shared) == 1  # the variants pinning earlier rounds' (gone) inputs were dropped


def _new_static_each_round(run, rounds: int, calls: int = 2):
    """`rounds` rounds of `calls` calls, each round with a new parameter, the last round's gone."""
    y = torch.randn(10)
    w = None
    for _ in range(rounds):
        w = torch.nn.Parameter(torch.randn(10) + (0 if w is None else 0 * w.detach()), requires_grad=False)
        gc.collect()
        for _ in range(calls):
            torch.testing.assert_close(run([y, w])[0], y + w)


def test_a_re_record_at_a_key_recorded_before_warms_up_nothing_and_takes_the_dropped_pool(options):
    """A decoder's new cache per `generate`: the first record warms up twice (compile, tune,
    settle), the later ones at the same key not at all, and each captures in the memory pool of
    the variant it replaces (that graph never replays again): one pool across generates."""
    run = Sim(add_program(10), options)
    _new_static_each_round(run, 5)
    assert len(run.records) >= 5 and [w for w, _ in run.records] == [2] + [0] * (len(run.records) - 1)
    shares = [share for _, share in run.records]
    assert shares[0] is None and shares[1:] == run.graphs[:-1]  # each the graph recorded before it
    (kept,) = run.slot().shared
    assert kept.graph is run.graphs[-1] and run.prog._spare is None  # the dropped graphs are not kept


@pytest.mark.parametrize("failure", [cudagraph.NeedsWarmUp(), RuntimeError("operation not permitted when stream "
                                     "is capturing")], ids=["no-specialized-run", "capture-failed"])
def test_a_capture_that_fails_without_warm_up_is_retried_after_one(options, failure, monkeypatch):
    """Skipping the warm-up must never cost the CUDA Graphs: a capture without one that finds no
    specialized run for its inputs, or fails (a kernel variant compiled under capture), is retried
    once after a warm-up run, with no fallback and no warning. Only a failed capture needs the
    recovery (a synchronize and an empty capture) and a new pool; one that found no run captured
    nothing."""
    recovered = []
    monkeypatch.setattr(cudagraph, "recover_from_failed_capture", recovered.append)
    run = Sim(add_program(10), options)
    run.fail_unwarmed = failure
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _new_static_each_round(run, 3)
    retried = run.records[1:]
    assert len(retried) >= 4 and [w for w, _ in retried] == [0, 1] * (len(retried) // 2)
    # a failed capture's retry takes a new pool; one that captured nothing keeps the dropped graph's
    fresh = not isinstance(failure, cudagraph.NeedsWarmUp)
    assert all((share is None) == fresh for _, share in retried[1::2]) and run.prog.fallback is None
    assert len(run.graphs) == 1 + len(retried) // 2 and sum(g.replays for g in run.graphs) >= 3  # not launched
    assert len(recovered) == (0 if isinstance(failure, cudagraph.NeedsWarmUp) else len(retried) // 2)


def test_a_pinned_input_at_its_address_with_other_strides_is_not_replayed_in_place(options):
    """The fast path compares a variant's pinned strides once per accepted input layout (the C
    guard vouches for the rest): a parameter passed at the pinned address but with other strides
    (every other element of the same storage) must still not be read in place, however the two
    alternate, and past the guard's relearning limit too."""
    run = Sim(add_program(10), options)
    base = torch.randn(20)
    dense = torch.nn.Parameter(base[:10], requires_grad=False)
    strided = torch.nn.Parameter(base.as_strided((10,), (2,)), requires_grad=False)
    assert dense.data_ptr() == strided.data_ptr() and dense.stride() != strided.stride()
    y = torch.randn(10)
    for k in range(24):
        w = strided if k % 3 == 2 else dense
        torch.testing.assert_close(run([y, w])[0], y + w)
    assert run.general < 24  # the dense calls took the fast path


def test_static_sets_taking_turns_do_not_re_record_each_call(options):
    """Three live parameter sets used in turn (three modules sharing one compiled graph): past the
    first record of each set, a move is no new cache but a set seen before, so it does not
    re-record on every call (with MAX_SHARED = 2 each call would drop the variant the next needs);
    the calls go on as before the re-records existed: copying variants, then launches."""
    run = Sim(add_program(10), options)
    y = torch.randn(10)
    sets = [torch.nn.Parameter(torch.randn(10), requires_grad=False) for _ in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(30):
            w = sets[k % 3]
            torch.testing.assert_close(run([y, w])[0], y + w)
    slot = run.slot()
    assert slot.moves == 0 and len(run.graphs) <= MAX_RECORDS + cudagraph.MAX_PRIVATE
    messages = [str(w.message) for w in caught if "cudagraph runtime" in str(w.message)]
    assert len(messages) == 1 and "keep moving between calls" in messages[0], messages


def test_inputs_that_keep_moving_are_not_blamed_on_held_outputs(options):
    """Inputs pinned because they stayed put, then moved, past every record (outputs dropped):
    the warning says the inputs move, not that the caller holds outputs (it holds none)."""
    run = Sim(add_program(10), options)
    y = torch.randn(10)
    xs = [torch.randn(10) for _ in range(12)]  # all alive: each its own address
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in xs:
            for _ in range(3):  # the same tensor three calls running: pinned, then it moves on
                torch.testing.assert_close(run([x, y])[0], x + y)
    messages = [str(w.message) for w in caught if "cudagraph runtime" in str(w.message)]
    assert messages and not any("still holds outputs" in m for m in messages), messages


def test_past_the_records_the_copying_variant_stays_on_the_fast_path(options):
    """Inputs that keep moving past every record (no static input moved): the copying variant
    serves them from the generated fast path, as before the re-records for moved static inputs;
    only each tensor's first call, and the records, take the general path."""
    run = Sim(add_program(10), options)
    y = torch.randn(10)
    xs = [torch.randn(10) for _ in range(12)]  # all alive: each its own address
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the one "keep moving" warning
        for x in xs:
            for _ in range(3):
                torch.testing.assert_close(run([x, y])[0], x + y)
    assert run.general == len(run.graphs) == MAX_RECORDS + 1  # six records and one copying variant


def test_a_copying_variant_at_moved_statics_gives_way_once_outputs_are_dropped(options, monkeypatch):
    """Records used up, the caller holding both shared variants' outputs when its weights move:
    a copying (private) variant serves it. Once the caller drops those outputs, the next call
    re-records a shared variant at the new weights instead of cloning outputs for good, on the
    general path and the generated fast path alike."""
    monkeypatch.setattr(cudagraph, "MAX_RECORDS", 2)
    run = Sim(add_program(10), options)
    y = torch.randn(10)
    w1, w2, w3 = (torch.nn.Parameter(torch.randn(10), requires_grad=False) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the one "still holds outputs" warning
        kept = [run([y, w1])[0], run([y, w2])[0]]  # two shared variants, both held
        torch.testing.assert_close(run([y, w3])[0], y + w3)  # a copying variant at w3
        assert run.slot().private is not None and run.slot().moves == 0
        del kept
        for _ in range(3):
            out = run([y, w3])[0]
            torch.testing.assert_close(out, y + w3)
    slot = run.slot()
    assert slot.moves == 1 and any(g.pinned.get(1, (None,))[0] == w3.data_ptr() for g in slot.shared)
    assert out.data_ptr() in {g.outputs[0].data_ptr() for g in slot.shared}  # an alias again, not a clone


def test_one_element_outputs_are_copies(options):
    """A loss the caller keeps in a list: cloned (for free), so the graph stays free."""
    run = Sim(add_program(1), options)
    x, y = torch.randn(1), torch.randn(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        losses = [run([x, y * k])[0] for k in range(6)]
    for k, loss in enumerate(losses):
        torch.testing.assert_close(loss, x + y * k)
    (g,) = run.slot().shared
    assert not g.tracked and run.slot().private is None


@pytest.mark.parametrize("c_guard", [True, False], ids=["c-guard", "python-checks-only"])
def test_the_replay_function_turns_away_inputs_of_another_dtype_shape_or_layout(options, monkeypatch, c_guard):
    """The replay function's Python checks (`InputSpec`, `same_strides`: loops, not generated
    lines) stand behind the C guard, and alone where it is missing: inputs of another dtype or
    shape are never replayed (the general path says what is wrong), and a pinned input passed
    with other strides is not read in place."""
    from pipec_runtime_cudagraph import input_guard

    if not c_guard:
        monkeypatch.setattr(input_guard, "TensorGuards", None)
    run = Sim(add_program(10), options)
    x, y = torch.randn(10), torch.randn(10)
    for _ in range(3):
        torch.testing.assert_close(run([x, y])[0], x + y)
    (generated,) = run.prog.replays.values()

    def replay(inputs):  # called directly: the simulated graphs read the call's inputs
        FakeGraph.current = list(inputs)
        try:
            return generated(inputs)
        finally:
            FakeGraph.current = []

    out = replay([x, y])
    assert out is not None and torch.equal(out[0], x + y)  # replayed: x and y are pinned
    del out  # else the graph's output is held, and no replay may overwrite it
    assert replay([x.double(), y]) is None and replay([x, torch.randn(5)]) is None
    # at the pinned address, but another dtype or shape: never read in place
    assert replay([x.view(torch.int32), y]) is None and replay([x, y[:5]]) is None
    strided = torch.randn(20)[::2]
    assert replay([x, strided]) is None or torch.equal(replay([x, strided])[0], x + strided)
    assert replay([x, y]) is not None  # the layout it learned is still served
    with pytest.raises(RuntimeError, match="has dtype float64, expected float32"):
        run([x.double(), y])
