"""pipec under torch.distributed on the CPU: 2 gloo processes, each scenario's gradients equal
to the same model run uncompiled under the same parallelism (docs/distributed.md)."""

import socket
import sys

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(not dist.is_available() or sys.platform == "win32",
                                reason="needs torch.distributed with gloo")

WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every scenario in one pair of processes (each start costs seconds of imports)."""
    import distributed_workers

    names = list(distributed_workers.SCENARIOS)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    # a compile cache of their own: this module-scoped fixture runs before conftest's per-test one
    with pytest.MonkeyPatch.context() as mp_env:
        mp_env.setenv("PIPEC_CACHE_DIR", str(tmp_path_factory.mktemp("pipec-cache")))
        mp_env.delenv("PIPEC_CACHE", raising=False)
        torch_cache = str(tmp_path_factory.mktemp("torch-cache"))
        mp.start_processes(distributed_workers.run, args=(WORLD, free_port(), names, queue, torch_cache),
                           nprocs=WORLD, start_method="spawn")
    out: dict = {}
    for _ in range(WORLD * len(names)):
        rank, name, result = queue.get(timeout=60)
        out.setdefault(name, {})[rank] = result
    return out


def check(results, name):
    for rank in range(WORLD):
        assert "error" not in results[name][rank], results[name][rank]["error"]
    return results[name][0]


def test_ddp_with_ddpoptimizer_splits(results):
    r = check(results, "ddp")
    # DDPOptimizer split the model at its buckets: several forward graphs, each compiled by pipec
    assert r["kinds"].count("forward") >= 2 and r["kinds"].count("backward") >= 2, r["kinds"]
    assert r["matmuls"] >= 3


def test_fsdp2_per_block_compile(results):
    r = check(results, "fsdp2_per_block")
    assert r["kinds"].count("forward") == 2 and r["kinds"].count("backward") == 2, r["kinds"]
    # each block's two Linear layers forward, and their input and weight gradients backward
    assert r["matmuls"] >= 2 * 2, r


def test_collectives_are_ir_nodes_started_early_and_waited_late(results):
    """Functional collectives compile to pipec's collective ops (no extern fallback), equal to
    eager on both ranks; each start comes as soon as its input is made and each wait just before
    its first reader, with independent kernels in between (docs/distributed.md)."""
    r = check(results, "collectives")
    assert not any(t.startswith("_c10d_functional") for t, _ in r["extern_ops"]), r["extern_ops"]
    assert r["kinds"].count("collective") == 8, r["kinds"]  # 4 starts, 4 waits
    steps = r["steps"]
    assert results["collectives"][1]["steps"] == steps  # every rank issues them in one order
    made_at = {out: i for i, (_, _, _, outs) in enumerate(steps) for out in outs}
    starts = [i for i, s in enumerate(steps) if s[1].startswith("_c10d_functional.") and "wait_tensor" not in s[1]]
    waits = [i for i, s in enumerate(steps) if s[1] == "_c10d_functional.wait_tensor.default"]
    assert len(starts) == len(waits) == 4
    for i in starts:  # as early as the inputs allow: only other starts since its input was made
        ready = max((made_at[v] for v in steps[i][2] if v in made_at), default=-1)
        assert all(k in starts for k in range(ready + 1, i)), (steps[i], steps)
    for i in waits:  # as late as its first reader: only other waits between it and that reader
        (value,) = steps[i][3]
        first_reader = min(k for k, s in enumerate(steps) if value in s[2])
        assert all(k in waits for k in range(i + 1, first_reader)), (steps[i], steps)
    # the all_reduce's communication overlaps kernels that do not depend on it
    (start,) = [i for i in starts if steps[i][1] == "_c10d_functional.all_reduce.default"]
    (wait,) = [i for i in waits if steps[i][2] == steps[start][3]]
    assert any(s[0] == "launch" for s in steps[start + 1:wait]), steps


def test_ddp_compiled_autograd_all_reduces_are_pipec_collectives(results):
    """The backward graph's gradient all-reduces are pipec collectives, each started as soon as
    its gradient is made and waited for only after the whole backward's compute (they overlap
    it); gradients equal plain DDP's."""
    r = check(results, "ddp_compiled_autograd")
    assert not any(t.startswith("_c10d_functional") for t in r["extern_ops"]), r["extern_ops"]
    (kernels,) = r["kernels"]
    starts = [i for i, (_, name) in enumerate(kernels) if name.startswith("pipec_all_reduce_")]
    waits = [i for i, (_, name) in enumerate(kernels) if name.startswith("pipec_wait_tensor_")]
    assert len(starts) == len(waits) == 6, kernels  # one per parameter of the Block
    compute = [i for i, (kind, _) in enumerate(kernels) if kind in ("matmul", "reduction")]
    assert starts[0] < compute[-1] < waits[0], kernels


def test_tensor_parallel_block_compiled(results):
    """A Megatron-style attention + MLP block under ColwiseParallel/RowwiseParallel compiled by
    pipec: outputs and gradients equal to uncompiled TP on both ranks, every matmul compiled,
    DTensor's all-reduces pipec collectives."""
    r = check(results, "tensor_parallel")
    assert r["kinds"] == ["forward", "backward"], r["kinds"]
    assert not any(t.startswith("_c10d_functional") for t in r["extern_ops"]), r["extern_ops"]
    # forward: the partial sums of o and down (row-wise); backward: the input gradients of
    # q, k, v and up (column-wise), one all-reduce each
    assert sum(n.startswith("pipec_all_reduce_") for n in r["collectives"]) == 2 + 4, r["collectives"]
    assert sum(n.startswith("pipec_wait_tensor_") for n in r["collectives"]) == 2 + 4, r["collectives"]
    # 6 layers: each one's product forward, and its weight and input gradients backward
    assert r["matmuls"] >= 6 * 3, r


def test_explain_says_when_dynamo_hands_pipec_nothing():
    """torch's own layers wrapped in DDP: Dynamo compiles nothing, and explain says so."""
    import os

    import pipec
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import distributed_workers

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        bare = DDP(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
        report = pipec.explain(bare, torch.randn(2, 4))
        assert report.graph_count == 0 and "handed pipec no graph" in report.notes[0]
        torch._dynamo.reset()
        own = DDP(distributed_workers.Block(4))
        assert pipec.explain(own, torch.randn(2, 4)).notes == []
    finally:
        dist.destroy_process_group()


def test_explain_on_fsdp2_models_in_training():
    """FSDP2 refuses deepcopy, which explain's training comparison used: explain now compiles the
    model itself after the eager run and compares its gradients. With torch's own Linear as the
    FSDP units Dynamo hands pipec nothing, and explain says so; with the user's blocks it compiles."""
    import os
    import warnings

    import pipec
    import torch
    from torch.distributed.fsdp import fully_shard

    import distributed_workers

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        bare = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
        for layer in (bare[0], bare[2]):
            fully_shard(layer)
        fully_shard(bare)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = pipec.explain(bare, torch.randn(2, 4))
        assert report.graph_count == 0 and "handed pipec no graph" in report.notes[0]
        assert any("cannot be copied" in str(w.message) for w in caught)
        torch._dynamo.reset()
        net = distributed_workers.Net()
        for block in net.blocks:
            fully_shard(block)
        fully_shard(net)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = pipec.explain(net, torch.randn(4, 8, 32))
        assert report.graph_count >= 2 and report.mismatch is None, (report.graph_count, report.mismatch)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("name", ["pipeline_manual_stages", "pipeline_split"])
def test_pipeline_parallel_stages_compiled(results, name):
    """torch.distributed.pipelining with each rank's stage compiled by pipec (Net cut before its
    second block; 4 microbatches): from per-rank modules with Schedule1F1B, and from `pipeline()`'s
    split with ScheduleGPipe. The losses and every gradient of two training steps equal the same
    pipeline run uncompiled (checked in the workers)."""
    check(results, name)
    for rank, linears in ((0, 2), (1, 3)):  # rank 0: a block's up and down; rank 1: a block and the head
        r = results[name][rank]
        # one forward and one backward graph serve every microbatch of both steps
        assert r["kinds"] == ["forward", "backward"], r
        assert r["forward_matmuls"] == linears, r
        assert r["matmuls"] >= 2 * linears, r  # and each layer's weight gradient
        assert r["extern_ops"] == [], r


def test_fsdp2_whole_model_compile_breaks_at_each_fsdp_hook(results):
    """FSDP2 (fully_shard on each block and the root) with the whole model compiled: FSDP2 runs
    its hooks under torch._dynamo.disable, so Dynamo breaks the graph at each block's call.
    Gradients equal uncompiled FSDP2 over two steps either way (checked in the workers); what
    pipec gets depends on the root's forward (docs/distributed.md)."""
    r = check(results, "fsdp2_whole_model")
    # blocks in a loop: a graph break inside a loop makes Dynamo skip Net.forward's frame; each
    # block's forward is compiled as a frame of its own (as per-block compile), the head runs eagerly
    loop = r["Net"]
    assert loop["skipped"] == [("forward", "distributed_workers.py")], loop
    assert loop["dynamo_graphs"] == 2 and loop["forward_matmuls"] == [2, 2], loop
    # each graph's backward is compiled right after its forward (option early_compile), not at the
    # first backward call
    assert loop["kinds"] == ["forward", "backward"] * 2, loop
    # blocks called one by one: Dynamo breaks at each block's FSDP pre-forward hook and resumes
    # after the call; each block and the head (the root's own layer) are compiled
    each = r["NetCallingEachBlock"]
    assert each["skipped"] == [], each
    assert [reason for reason, _ in each["breaks"]] == ["Attempted to call function marked as skipped"] * 2, each
    for (_, frames), call in zip(each["breaks"], ("x = self.blocks[0](x)", "x = self.blocks[1](x)"), strict=True):
        assert [line for file, _, line in frames if file == "distributed_workers.py"] == [call], frames
        assert frames[-2][2].startswith("args_kwargs_result = hook(self, args, kwargs)"), frames
        assert frames[-1][:2] == ("_fsdp_common.py", "wrapper"), frames  # FSDP2's _dynamo_disable
    assert each["dynamo_graphs"] == 3 and each["forward_matmuls"] == [2, 2, 1], each
    assert each["kinds"] == ["forward", "backward"] * 3, each
