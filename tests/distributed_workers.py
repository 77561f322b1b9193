"""Worker processes of test_distributed.py: 2 ranks on gloo (CPU), each scenario comparing a
pipec-compiled model with the same model uncompiled, under the same parallelism."""

from __future__ import annotations

import copy
import os
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn import functional as F



WIDTH = 32


class Block(torch.nn.Module):
    """A pre-norm MLP block: LayerNorm, Linear, GELU, Linear, residual."""

    def __init__(self, d: int = WIDTH) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(torch.nn.Module):
    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(blocks))
        self.head = torch.nn.Linear(WIDTH, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


class Stack(torch.nn.Module):
    """Three 1 MiB Linear layers with GELU: with 1 MiB buckets, DDPOptimizer splits after each."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(512, 512) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = F.gelu(layer(x))
        return x


def pipec_backend():
    """A pipec torch.compile backend and the Session recording what it compiled."""
    from pipec.api import make_options
    from pipec.backend import make_backend
    from pipec.pipeline import Session

    session = Session()
    return make_backend(make_options(), session), session


def matmuls_compiled(session) -> int:
    """Matrix products that pipec generated code for (a kernel of kind matmul)."""
    return sum(1 for g in session.graphs for unit in (g.units or []) if unit["kind"] == "matmul")


def batch(rank: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(100 + rank))


def compare_grads(model, reference, full=lambda t: t):
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(full(p.grad), full(q.grad), msg=lambda m, name=name: f"{name}: {m}")


# ---------------------------------------------------------------- scenarios


def ddp(rank: int) -> dict:
    """DDP with the model compiled by pipec; buckets of 1 MiB over 1 MiB layers make Dynamo's
    DDPOptimizer split the graph at each bucket (one graph per bucket, forward and backward)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    # the user's own module class: Dynamo does not trace into torch's own modules' frames (a
    # bare nn.Sequential of torch layers under DDP reaches no backend at all)
    net = Stack()
    reference = DDP(copy.deepcopy(net))
    model = DDP(net, bucket_cap_mb=1)
    backend, session = pipec_backend()
    compiled = torch.compile(model, backend=backend)
    for step in range(2):
        x = batch(rank + 10 * step, 4, 512)
        compiled(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
        compare_grads(model, reference)
    return {"kinds": [g.kind for g in session.graphs], "matmuls": matmuls_compiled(session)}


def fsdp2_per_block(rank: int) -> dict:
    """FSDP2 as torchtitan runs it: fully_shard each block and the root, each block compiled."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model, reference = Net(), Net()
    reference.load_state_dict(model.state_dict())
    backend, session = pipec_backend()
    for block, twin in zip(model.blocks, reference.blocks):
        fully_shard(block)
        block.compile(backend=backend)
        fully_shard(twin)
    fully_shard(model)
    fully_shard(reference)
    x = batch(rank, 4, 8, WIDTH)
    model(x).pow(2).sum().backward()
    reference(x).pow(2).sum().backward()
    compare_grads(model, reference, full=lambda t: t.full_tensor())
    return {"kinds": [g.kind for g in session.graphs], "matmuls": matmuls_compiled(session)}


class NetCallingEachBlock(Net):
    """Net with its two blocks called one by one instead of in a loop."""

    def forward(self, x):
        x = self.blocks[0](x)
        x = self.blocks[1](x)
        return self.head(x)


def dynamo_breaks() -> dict:
    """What Dynamo recorded since its counters were last cleared: each graph break (reason, and the
    last frames of the user stack as (file, function, source line)) and each frame it gave up on
    and ran eagerly ((function, file) from "frame skipped: ..."), e.g. a graph break in a loop."""
    import re

    from torch._dynamo.utils import counters, graph_break_reasons

    breaks = [(str(r.reason).splitlines()[0],
               [(os.path.basename(f.filename), f.name, (f.line or "").strip()) for f in r.user_stack][-5:])
              for r in graph_break_reasons]
    messages = [*counters["graph_break"], *counters["unimplemented"]]
    skipped = sorted({(name, os.path.basename(path)) for m in messages
                      for name, path in re.findall(r"frame skipped: (\S+) \((\S+) line \d+\)", m)})
    return {"breaks": breaks, "skipped": skipped}


def fsdp2_whole_model(rank: int) -> dict:
    """FSDP2 with the whole model compiled: fully_shard on each block and the root, then
    torch.compile(model). FSDP2 runs its hooks under torch._dynamo.disable, so Dynamo breaks the
    graph at each block's call; how far it gets depends on the root's forward (a loop over the
    blocks, or one call per block). Two steps (SGD between them), gradients compared each step."""
    from torch._dynamo.utils import counters
    from torch.distributed.fsdp import fully_shard

    out = {}
    for cls in (Net, NetCallingEachBlock):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model, reference = cls(), cls()
        reference.load_state_dict(model.state_dict())
        for m in (model, reference):
            for block in m.blocks:
                fully_shard(block)
            fully_shard(m)
        backend, session = pipec_backend()
        compiled = torch.compile(model, backend=backend)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
        for step in range(2):
            x = batch(rank + 10 * step, 4, 8, WIDTH)
            compiled(x).pow(2).mean().backward()
            reference(x).pow(2).mean().backward()
            compare_grads(model, reference, full=lambda t: t.full_tensor())
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad()
        out[cls.__name__] = {
            "kinds": [g.kind for g in session.graphs], "dynamo_graphs": session.dynamo_graphs,
            "matmuls": matmuls_compiled(session),
            "forward_matmuls": [sum(1 for unit in g.units if unit["kind"] == "matmul")
                                for g in session.graphs if g.kind == "forward"],
            **dynamo_breaks()}
    return out


def comm_model(x, w, y):
    """Functional collectives inside a compiled function, each with work it does not depend on."""
    import torch.distributed._functional_collectives as fc

    group = dist.group.WORLD
    h = torch.tanh(x @ w)
    summed = fc.all_reduce(h, "sum", group)                 # needs h: starts right after its kernel
    gathered = fc.all_gather_tensor(y * 2, 0, group)        # needs only an input
    scattered = fc.reduce_scatter_tensor(y.t().contiguous(), "avg", 0, group)
    swapped = fc.all_to_all_single(y + 1, None, None, group)
    independent = (y.sin() * y).sum(-1)                     # overlaps the communication
    out = summed.relu() + h                                 # the all_reduce's first reader
    return out, gathered.cos(), scattered * 3, swapped - y, independent


def collectives(rank: int) -> dict:
    """Collectives as pipec IR nodes: results equal to eager, and the compiled program's order."""
    backend, session = pipec_backend()
    compiled = torch.compile(comm_model, backend=backend, fullgraph=True)
    x, w, y = batch(rank, 4, 8), batch(7, 8, 6), batch(rank + 2, 6, 4)
    want = comm_model(x, w, y)
    for got, expected in zip(compiled(x, w, y), want, strict=True):
        torch.testing.assert_close(got, expected)
    (graph,) = session.graphs
    # the reference interpreter (docs/IR.md's meaning of each op) agrees, collectives included
    from pipec_capture.reference import run_graph

    for got, expected in zip(run_graph(graph.plan.graph, [x, w, y]), want, strict=True):
        torch.testing.assert_close(got, expected)
    steps = [(s.kind, s.target, s.inputs, s.outputs) for s in graph.program.steps]
    return {"steps": steps, "extern_ops": list(graph.extern_ops or ()),
            "kinds": [k.kind for k in graph.plan.kernels]}


def ddp_compiled_autograd(rank: int) -> dict:
    """DDP under compiled autograd (`optimize_ddp="python_reducer"`): the gradient all-reduces
    are functional collectives inside the backward graph, compiled by pipec as collective ops."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    net = Block(16)
    reference = DDP(copy.deepcopy(net))
    backend, session = pipec_backend()
    x = batch(rank, 4, 16)
    with torch._dynamo.config.patch(optimize_ddp="python_reducer"):
        model = DDP(net)
        with torch._dynamo.compiled_autograd._enable(torch.compile(backend=backend)):
            torch.compile(model, backend=backend)(x).pow(2).sum().backward()
    reference(x).pow(2).sum().backward()
    compare_grads(model, reference)
    backward = [g for g in session.graphs if any(k.kind == "collective" for k in g.plan.kernels)]
    return {"kernels": [[(k.kind, k.name) for k in g.plan.kernels] for g in backward],
            "extern_ops": [t for g in session.graphs for t, _ in g.extern_ops]}


class TPBlock(torch.nn.Module):
    """A Megatron-style block: causal attention (q, k, v split by columns, so each rank has
    its own heads; o by rows) and an MLP (`up` by columns, `down` by rows)."""

    PLAN = {"q": "col", "k": "col", "v": "col", "o": "row", "up": "col", "down": "row"}

    def __init__(self, d: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.head_dim = d // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        b, s, _ = x.shape
        # -1: the heads of this rank (a column-wise layer's output is its share of the heads)
        q, k, v = (lin(x).view(b, s, -1, self.head_dim).transpose(1, 2) for lin in (self.q, self.k, self.v))
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1))
        return x + self.down(F.gelu(self.up(x)))


def tensor_parallel(rank: int) -> dict:
    """Tensor parallel (DTensor, ColwiseParallel + RowwiseParallel) with the block compiled: the
    graphs take the DeviceMesh as an object input, and DTensor's all-reduces (forward: each
    row-wise layer's output; backward: the gradients of the column-wise layers' input) are
    pipec collective ops."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    styles = {"col": ColwiseParallel, "row": RowwiseParallel}
    plan = {name: styles[style]() for name, style in TPBlock.PLAN.items()}
    torch.manual_seed(0)
    model = TPBlock()
    reference = copy.deepcopy(model)
    parallelize_module(model, mesh, plan)
    parallelize_module(reference, mesh, plan)
    backend, session = pipec_backend()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    x = batch(0, 2, 5, 16).requires_grad_()  # TP's input is replicated: the same on every rank
    x_ref = x.detach().clone().requires_grad_()
    out, want = compiled(x), reference(x_ref)
    torch.testing.assert_close(out, want)
    out.pow(2).sum().backward()
    want.pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    compare_grads(model, reference, full=lambda t: t.full_tensor())
    return {"kinds": [g.kind for g in session.graphs], "matmuls": matmuls_compiled(session),
            "collectives": [k.name for g in session.graphs for k in g.plan.kernels if k.kind == "collective"],
            "extern_ops": [t for g in session.graphs for t, _ in g.extern_ops]}


class PipeStage(torch.nn.Module):
    """One stage of Net cut into a pipeline: some of its blocks, and the head on the last stage.
    A module class of the user's own: `.compile()` in place on a torch container (nn.Sequential)
    would compile only the user's modules inside it, running torch's own layers (the head) eagerly."""

    def __init__(self, blocks, head=None) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(blocks)
        self.head = head

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x if self.head is None else self.head(x)


MICROBATCHES = 4


def train_pipeline(rank: int, make_stage, schedule_class) -> dict:
    """Two training steps (SGD between them) of a 2-stage pipeline, twice: each rank's stage module
    compiled by pipec in place, and an uncompiled twin; the losses (last stage) and every gradient
    compared at each step. `make_stage()` builds a fresh PipelineStage of the same Net."""
    backend, session = pipec_backend()
    runs = []
    for compiled in (True, False):
        stage = make_stage()
        if compiled:
            stage.submod.compile(backend=backend)
        schedule = schedule_class(stage, MICROBATCHES, loss_fn=F.mse_loss)
        runs.append((stage.submod, schedule, torch.optim.SGD(stage.submod.parameters(), lr=0.1)))
    last = rank == dist.get_world_size() - 1
    for step in range(2):
        # the whole batch: the first stage feeds x, the last compares with y, per microbatch
        x, y = batch(step, 2 * MICROBATCHES, 8, WIDTH), batch(10 + step, 2 * MICROBATCHES, 8, 4)
        losses = []
        for _, schedule, optimizer in runs:
            optimizer.zero_grad()
            losses.append([])
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=y, losses=losses[-1])
        assert len(losses[0]) == (MICROBATCHES if last else 0), losses
        torch.testing.assert_close(losses[0], losses[1])
        compare_grads(runs[0][0], runs[1][0])
        for _, _, optimizer in runs:
            optimizer.step()
    return {"kinds": [g.kind for g in session.graphs], "matmuls": matmuls_compiled(session),
            "forward_matmuls": sum(1 for g in session.graphs if g.kind == "forward"
                                   for unit in g.units if unit["kind"] == "matmul"),
            "extern_ops": [t for g in session.graphs for t, _ in g.extern_ops]}


def pipeline_manual_stages(rank: int) -> dict:
    """Pipeline parallel from per-rank modules: rank 0 runs Net's first block, rank 1 its second
    block and the head; each rank's PipelineStage module compiled by pipec; Schedule1F1B."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    torch.manual_seed(0)
    net = Net(blocks=2)

    def make_stage():
        copy_ = copy.deepcopy(net)
        module = PipeStage([copy_.blocks[0]]) if rank == 0 else PipeStage([copy_.blocks[1]], copy_.head)
        return PipelineStage(module, rank, dist.get_world_size(), torch.device("cpu"))

    return train_pipeline(rank, make_stage, Schedule1F1B)


def pipeline_split(rank: int) -> dict:
    """Pipeline parallel from `pipeline()`: Net traced (torch.export) and split before its second
    block; each rank's stage (a GraphModule) compiled by pipec; ScheduleGPipe."""
    from torch.distributed.pipelining import ScheduleGPipe, SplitPoint, pipeline

    torch.manual_seed(0)
    net = Net(blocks=2)
    microbatch = batch(0, 2, 8, WIDTH)

    def make_stage():
        pipe = pipeline(copy.deepcopy(net), mb_args=(microbatch,), split_spec={"blocks.1": SplitPoint.BEGINNING})
        return pipe.build_stage(rank, torch.device("cpu"))

    return train_pipeline(rank, make_stage, ScheduleGPipe)


SCENARIOS = {"ddp": ddp, "fsdp2_per_block": fsdp2_per_block, "collectives": collectives,
             "ddp_compiled_autograd": ddp_compiled_autograd, "tensor_parallel": tensor_parallel,
             "pipeline_manual_stages": pipeline_manual_stages, "pipeline_split": pipeline_split,
             "fsdp2_whole_model": fsdp2_whole_model}


# how long a rank waits in a collective for the other: a scenario failing on one rank leaves the
# other waiting, and gloo's default of 30 minutes would spend CI's whole budget on that wait
COLLECTIVE_TIMEOUT = timedelta(seconds=120)


def run(rank: int, world: int, port: int, names: list[str], queue, torch_cache: str) -> None:
    # each rank its own AOTAutograd cache: the ranks compile the same graphs at the same time, and
    # a rank served the other's entry gets no KernelPlan, which the scenarios inspect
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      TORCHINDUCTOR_CACHE_DIR=os.path.join(torch_cache, f"rank{rank}"))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT)
    try:
        for name in names:
            torch._dynamo.reset()
            try:
                queue.put((rank, name, SCENARIOS[name](rank)))
            except Exception:  # noqa: BLE001 - reported to the test, which fails with it
                queue.put((rank, name, {"error": traceback.format_exc()}))
    finally:
        dist.destroy_process_group()



