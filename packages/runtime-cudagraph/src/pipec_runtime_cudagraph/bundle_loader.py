"""Running an exported artifact (bundle.py holds the file format): `load_artifact` checks the
file (`read_artifact`), loads its Program with the recorded runtime and binds the weights; the
callable it returns takes the user inputs, checked against the recorded guards first."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pipec_ir.symbolic import parse_expr

from .bundle import RUNTIMES, Artifact, ArtifactError, ArtifactInputError, read_artifact, torch_dtype_name, unflatten


class LoadedArtifact:
    """A loaded artifact: `model(*inputs)` returns what the exported model returned.

    Inputs are the user inputs only (weights come from the file), checked against the
    recorded guards before anything runs. `run(list)` returns the flat output list.
    """

    def __init__(self, artifact: Artifact, runtime: str | None = None, *, kernel_dir: str | None = None,
                 autotune: bool = True) -> None:
        import torch

        from pipec_ir import CompileOptions, LoadContext

        from .exprs import compile_ints

        self.artifact = artifact
        self.manifest = artifact.manifest
        self.name = artifact.name
        self.sha256 = artifact.sha256
        runtime = runtime or self.manifest.get("runtime", "launch")
        if runtime not in RUNTIMES:
            raise ArtifactError(f"{artifact.path}: runtime {runtime!r} cannot run an artifact "
                                f"(use one of: {', '.join(RUNTIMES)})")
        self.runtime = runtime
        options = CompileOptions(runtime=runtime, autotune=autotune)
        context = LoadContext(kernel_dir=None if kernel_dir is None else str(kernel_dir))
        if runtime == "cudagraph" and torch.cuda.is_available():
            from .cudagraph import load_cudagraph
            self._runner = load_cudagraph(artifact.program, options, context)
        else:
            from .launch import load_launch
            self._runner = load_launch(artifact.program, options, context)

        self.inputs = artifact.inputs
        self.structure = self.manifest["output_structure"]
        roles = {i.name: i.role for i in artifact.graph.inputs}
        user = {spec.name: k for k, spec in enumerate(self.inputs)}
        # per program input: ("input", index into the user inputs) or ("weight", name)
        self._binding = tuple(("input", user[b.name]) if roles[b.name] == "input" else ("weight", b.name)
                              for b in artifact.program.inputs)
        self._weights = {torch.device("cpu"): artifact.weights}

        # the guards: each symbol is read from the first input dimension that is exactly it
        shapes = [[parse_expr(str(d)) for d in spec.shape] for spec in self.inputs]
        source: dict[str, tuple[int, int]] = {}
        for i, shape in enumerate(shapes):
            for d, e in enumerate(shape):
                if e.is_Symbol and e.name not in source:
                    source[e.name] = (i, d)
        ranges = {s["name"]: s for s in self.manifest["symbols"]}
        used = {s.name for shape in shapes for e in shape for s in e.free_symbols}
        unbound = sorted(used - set(source))
        if unbound:
            raise ArtifactError(f"{artifact.path}: size symbol(s) {', '.join(unbound)} are not the size of "
                                "any input dimension")
        self._symbols = tuple(sorted(source))
        self._symbol_source = tuple(source[s] for s in self._symbols)
        self._symbol_ranges = tuple((ranges.get(s, {}).get("min"), ranges.get(s, {}).get("max"))
                                    for s in self._symbols)
        self._expected = [compile_ints(shape, self._symbols) for shape in shapes]
        self._dtypes = tuple(getattr(torch, spec.dtype) for spec in self.inputs)

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.inputs)
        return f"<pipec artifact {self.name} ({ins}) runtime={self.runtime}>"

    # ---------------------------------------------------------- guards
    def _fail(self, message: str):
        raise ArtifactInputError(f"{self.name}: {message}")

    def _describe_expected(self, k: int, symvals) -> str:
        shape = self.inputs[k].shape
        expected = self._expected[k](*symvals)
        if all(isinstance(d, int) for d in shape):
            return str(tuple(expected))
        used = {s.name for d in shape for s in parse_expr(str(d)).free_symbols}
        bound = ", ".join(f"{s}={v}" for s, v in zip(self._symbols, symvals) if s in used)
        return f"({', '.join(map(str, shape))}) = {tuple(expected)} with {bound}"

    def check_inputs(self, inputs: Sequence):
        """Check the user inputs against the recorded guards; -> (symbol values, device)."""
        import torch

        specs = self.inputs
        if len(inputs) != len(specs):
            names = ", ".join(s.name for s in specs)
            self._fail(f"expects {len(specs)} input{'s' if len(specs) != 1 else ''} ({names}), got {len(inputs)}")
        for k, (t, spec, dtype) in enumerate(zip(inputs, specs, self._dtypes)):
            if not isinstance(t, torch.Tensor):
                self._fail(f"input {k} ({spec.name}) is not a tensor (got {type(t).__name__})")
            if t.dtype != dtype:
                self._fail(f"input {k} ({spec.name}) has dtype {torch_dtype_name(t)}, expected {spec.dtype}")
            if t.dim() != len(spec.shape):
                self._fail(f"input {k} ({spec.name}) has shape {tuple(t.shape)} ({t.dim()} dims), expected "
                           f"({', '.join(map(str, spec.shape))}) ({len(spec.shape)} dims)")
        symvals = tuple(int(inputs[k].shape[d]) for k, d in self._symbol_source)
        for value, sym, (k, d), (lo, hi) in zip(symvals, self._symbols, self._symbol_source, self._symbol_ranges):
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                self._fail(f"input {k} ({specs[k].name}) has size {value} in dimension {d}, but {sym} must be in "
                           f"[{lo}, {hi if hi is not None else 'inf'}]")
        for k, (t, spec) in enumerate(zip(inputs, specs)):
            if tuple(t.shape) != self._expected[k](*symvals):
                self._fail(f"input {k} ({spec.name}) has shape {tuple(t.shape)}, expected "
                           f"{self._describe_expected(k, symvals)}")
        device = inputs[0].device if inputs else torch.device("cpu")
        for k, t in enumerate(inputs):
            if t.device != device:
                self._fail(f"input {k} ({specs[k].name}) is on {t.device}, input 0 is on {device}")
        return symvals, device

    # ---------------------------------------------------------- running
    def weights_on(self, device) -> dict:
        import torch

        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        found = self._weights.get(device)
        if found is None:
            cpu = self._weights[torch.device("cpu")]
            found = self._weights[device] = {k: t.to(device) for k, t in cpu.items()}
        return found

    def run(self, inputs: Sequence) -> list:
        """The flat list of outputs (program order) for the user inputs."""
        inputs = list(inputs)
        _, device = self.check_inputs(inputs)
        weights = self.weights_on(device)
        args = [inputs[ref] if kind == "input" else weights[ref] for kind, ref in self._binding]
        return list(self._runner(args))

    def __call__(self, *inputs):
        return unflatten(self.structure, self.run(inputs))

    def random_inputs(self, seed: int = 0, device=None) -> tuple:
        """Inputs made from the recorded specs (symbols at their example sizes), reproducibly."""
        import torch

        gen = torch.Generator().manual_seed(seed)
        hints = {s["name"]: s["hint"] for s in self.manifest["symbols"]}
        values = tuple(hints.get(s, 2) for s in self._symbols)
        out = []
        for k, dtype in enumerate(self._dtypes):
            shape = self._expected[k](*values)
            if dtype.is_floating_point:
                t = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
            elif dtype == torch.bool:
                t = torch.randint(0, 2, shape, generator=gen).bool()
            else:
                t = torch.randint(0, 8, shape, generator=gen).to(dtype)
            out.append(t if device is None else t.to(device))
        return tuple(out)


def load_artifact(path: str | os.PathLike | bytes, runtime: str | None = None, *, sha256: str | None = None,
                  kernel_dir: str | None = None, autotune: bool = True) -> LoadedArtifact:
    """Check and load an artifact: a callable taking the user inputs (weights are bound from the file).

    `runtime` overrides the recorded one ("launch" or "cudagraph"); `sha256` pins the
    file's digest. Raises `ArtifactError` (one line) for a file that is not a pipec
    artifact, was modified, or whose parts disagree.
    """
    return LoadedArtifact(read_artifact(path, sha256=sha256), runtime, kernel_dir=kernel_dir, autotune=autotune)


__all__ = ["LoadedArtifact", "load_artifact"]
