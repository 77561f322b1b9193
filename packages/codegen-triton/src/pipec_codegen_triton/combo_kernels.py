"""Combo kernels: runs of small, independent pointwise launches become one launch.

A compiled optimizer step updates every parameter in a kernel of its own (the parameters have
different shapes, so fusion cannot merge them): BERT base's AdamW step made 232 launches, and
at ~5 us of host time each the step was bound by the host (5.44 ms on the H200 against
Inductor's 1.78 ms with its 14 combo kernels; docs/performance.md, "Combo kernels"). Here a run
of consecutive launch steps that touch no common memory is launched as one Triton kernel: its
program ids are split into ranges, one per member, and each range calls the member's own kernel
body (a `@triton.jit` function taking the program id as its first parameter). Members with the
same body (the twelve layers' same-shaped parameters) share one function.

A step joins the run before it when:

* it launches a pointwise kernel of one grid axis whose sizes are all static (the split of the
  program ids is written into the source) and of at most COMBO_MAX_NUMEL elements: a kernel
  that fills the GPU alone keeps its own launch and its autotuned config;
* it shares no storage with any member in a way that orders them: it reads nothing a member
  writes, and writes nothing a member reads or writes. Storage is the memory-plan slot, the
  input a value is written into in place, or the buffer's own name; a value an extern or view
  step made may alias that step's inputs, so it counts as all of them;
* the run stays within COMBO_MAX_PARTS members and COMBO_MAX_ARGS pointer arguments (a kernel's
  parameters must fit CUDA's 4 KiB launch parameter space).

A combo has one launch config, COMBO_CONFIG (the first pointwise config of a large kernel):
the ranges are fixed in the source, so its block size cannot be tuned. Runs of one launch stay
as they are. Off with the compile option `combo_kernels=False`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy
from pipec_ir import Buffer, LaunchConfig, Step, TritonKernel, make_attrs

COMBO_MAX_NUMEL = 1 << 22  # 4M elements: larger pointwise kernels fill the H200 on their own
COMBO_MAX_PARTS = 32
COMBO_MAX_ARGS = 256  # pointers: 2 KiB of parameters
COMBO_BLOCK = 1024
COMBO_CONFIG = LaunchConfig((("XBLOCK", COMBO_BLOCK),), num_warps=4)
_PID = "pid"


@dataclass
class _Run:
    steps: list[Step] = field(default_factory=list)
    reads: set = field(default_factory=set)
    writes: set = field(default_factory=set)
    args: int = 0


def combine_launches(steps: tuple[Step, ...], kernels: list[TritonKernel], buffers: tuple[Buffer, ...],
                     pointwise: set[str], *, debug: bool = False) -> tuple[tuple[Step, ...], list[TritonKernel]]:
    """(steps, kernels) with each run of two or more combinable launches (module docstring) made
    one launch of a new combo kernel; the members' own kernels go where nothing else launches
    them. `debug`: the combo is compiled with Triton's debug flag, as its bounds-checked members
    are (their assertions are compiled only in a debug kernel)."""
    by_name = {k.name: k for k in kernels}
    storage = _Storage(steps, buffers)
    out: list[Step] = []
    combos: list[TritonKernel] = []
    run = _Run()

    def flush():
        if len(run.steps) == 1:
            out.append(run.steps[0])
        elif run.steps:
            step, kernel = _combo(f"pipec_combo_{len(combos)}", run.steps, by_name, debug)
            out.append(step)
            combos.append(kernel)

    for step in steps:
        kernel = by_name.get(step.target) if step.kind == "launch" else None
        if kernel is None or step.target not in pointwise or not _combinable(kernel, step):
            flush()
            run = _Run()
            out.append(step)
            storage.made(step)
            continue
        reads, writes = storage.of(step)
        args = len(step.inputs) + len(step.outputs)
        if (reads & run.writes or writes & (run.reads | run.writes) or len(run.steps) >= COMBO_MAX_PARTS
                or run.args + args > COMBO_MAX_ARGS):
            flush()
            run = _Run()
        run.steps.append(step)
        run.reads |= reads
        run.writes |= writes
        run.args += args
    flush()
    launched = {s.target for s in out if s.kind == "launch"}
    kept = [k for k in kernels if k.name in launched]
    return tuple(out), kept + combos


def _combinable(kernel: TritonKernel, step: Step) -> bool:
    if len(kernel.grid) != 1 or kernel.grid[0][1] != "XBLOCK":
        return False
    if set(dict(step.attrs)) - {"inplace"}:
        return False
    sizes = dict(kernel.sizes)
    if not all(sympy.sympify(v).is_Integer for v in sizes.values()):
        return False
    numel = sympy.sympify(kernel.grid[0][0])
    return numel.is_Integer and int(numel) <= COMBO_MAX_NUMEL and _split(kernel) is not None


class _Storage:
    """What memory each value of the program lives in (module docstring)."""

    def __init__(self, steps: tuple[Step, ...], buffers: tuple[Buffer, ...]):
        self.slot = {b.name: b.slot for b in buffers if b.slot is not None}
        self.aliases: dict[str, frozenset] = {}
        for step in steps:
            # a launch's output written over one of its inputs (`inplace`): into a graph input
            # (Graph.writes), or into the slot of an input dying there (the memory plan)
            for value, target in _inplace(step).items():
                self.aliases[value] = frozenset({self._own(value), self._own(target)})

    def _own(self, name: str) -> tuple:
        slot = self.slot.get(name)
        return ("slot", slot) if slot is not None else ("value", name)

    def _of(self, name: str) -> frozenset:
        return self.aliases.get(name) or frozenset({self._own(name)})

    def made(self, step: Step) -> None:
        """Record a step outside any run: what an extern or view makes may alias its inputs."""
        if step.kind == "launch":
            return
        inputs = frozenset().union(*(self._of(i) for i in step.inputs))
        for o in step.outputs:
            self.aliases[o] = self._of(o) | inputs

    def of(self, step: Step) -> tuple[set, set]:
        """(storage read, storage written) by a launch step."""
        return set().union(*(self._of(i) for i in step.inputs)), set().union(*(self._of(o) for o in step.outputs))


def _inplace(step: Step) -> dict[str, str]:
    """A launch's values stored into inputs: value -> input."""
    return dict(dict(step.attrs).get("inplace", ()) or ())


def _combo(name: str, steps: list[Step], by_name: dict[str, TritonKernel], debug: bool) -> tuple[Step, TritonKernel]:
    """One launch step and its kernel for the run `steps` (each a launch of a pointwise kernel)."""
    inputs: list[str] = []
    outputs: list[str] = []
    inplace: list = []
    parts: dict[str, str] = {}  # a member body (named "_part") -> its function's name
    preamble: list[str] = []
    branches: list[str] = []
    first_block = 0
    for step in steps:
        kernel = by_name[step.target]
        module, body = _split(kernel)
        for line in module:
            if line not in preamble:
                preamble.append(line)
        function = parts.setdefault(body, f"{name}_part{len(parts)}")
        args = []
        for value in step.inputs:
            if value not in inputs:
                inputs.append(value)
            args.append(f"in_ptr{inputs.index(value)}")
        for value in step.outputs:
            outputs.append(value)
            args.append(f"out_ptr{len(outputs) - 1}")
        args += [str(int(sympy.sympify(v))) for _, v in kernel.sizes]
        numel = int(sympy.sympify(kernel.grid[0][0]))
        blocks = -(-numel // COMBO_BLOCK)
        keyword = "if" if not branches else "elif"
        shifted = _PID if first_block == 0 else f"{_PID} - {first_block}"
        branches.append(f"    {keyword} {_PID} < {first_block + blocks}:  # {step.target} over {numel}\n"
                        f"        {function}({shifted}, {', '.join(args)}, XBLOCK)")
        first_block += blocks
        inplace += list(_inplace(step).items())
    pointers = [f"in_ptr{k}" for k in range(len(inputs))] + [f"out_ptr{k}" for k in range(len(outputs))]
    functions = [body.replace("def _part(", f"def {function}(", 1) for body, function in parts.items()]
    members = ", ".join(s.target for s in steps)
    imports = [line for line in preamble if line.startswith(("import ", "from "))]
    helpers = [block for block in preamble if block not in imports]
    source = "\n".join(imports) + "\n\n\n" + "\n\n\n".join(helpers + functions) + "\n\n\n" + (
        f"@triton.jit{'(debug=True)' if debug else ''}\ndef {name}({', '.join(pointers)}, XBLOCK: tl.constexpr):\n"
        f'    """{len(steps)} launches in one: {members}"""\n'
        f"    {_PID} = tl.program_id(0)\n" + "\n".join(branches) + "\n")
    kernel = TritonKernel(name=name, source=source, args=tuple(pointers), sizes=(),
                          grid=((sympy.Integer(first_block * COMBO_BLOCK), "XBLOCK"),), configs=(COMBO_CONFIG,))
    attrs = make_attrs(inplace=tuple(inplace)) if inplace else ()
    return Step("launch", name, tuple(inputs), tuple(outputs), attrs), kernel


def _split(kernel: TritonKernel) -> tuple[tuple[str, ...], str] | None:
    """(the module's other statements: import lines and helper functions, the kernel as a
    function `_part` taking the program id first, without its docstring), read off the layout
    KernelWriter gives a pointwise kernel (a `@triton.jit` line, the `def` line, a one-line
    docstring naming the kernel's values, `xoffset = tl.program_id(0) * XBLOCK`). Text, not an
    AST round trip: BERT base's AdamW step has 230 members, and parsing and printing each cost
    ~1 s of codegen on the CPU. None where the source is not laid out so (never combined)."""
    lines = kernel.source.split("\n")
    head = f"def {kernel.name}("
    at = [k for k, line in enumerate(lines) if line.startswith(head)]
    if len(at) != 1 or at[0] == 0 or not lines[at[0] - 1].startswith("@triton.jit"):
        return None
    d = at[0]
    body = lines[d + 1:]
    if body and body[0].startswith('    """') and body[0].count('"""') == 2:
        body = body[1:]  # its docstring names the kernel's values: bodies would differ by it
    text = "\n".join(body).rstrip()
    if text.count("tl.program_id(0)") != 1:
        return None
    function = "\n".join([lines[d - 1], f"def _part({_PID}, {lines[d][len(head):]}",
                           text.replace("tl.program_id(0)", _PID)])
    preamble: list[str] = []
    for block in "\n".join(lines[:d - 1]).split("\n\n"):
        block = block.strip("\n")
        if all(line.startswith(("import ", "from ")) for line in block.splitlines()):
            preamble += block.splitlines()  # import lines one by one: kernels differ in libdevice's
        elif block:
            preamble.append(block)
    return tuple(preamble), function
