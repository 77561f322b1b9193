"""Generated Python source: the lines of one function and the namespace its names refer to
(specialize.py's specialized runs, cudagraph.py's replay functions)."""

from __future__ import annotations

import functools

import torch

TORCH_EMPTY = torch.empty


class Source:
    """Accumulates generated lines and the namespace their names refer to."""

    def __init__(self):
        self.lines: list[str] = []
        self.namespace: dict[str, object] = {"EMPTY": TORCH_EMPTY}

    def const(self, prefix: str, value) -> str:
        name = f"{prefix}_{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def emit(self, line: str, indent: int = 1) -> None:
        self.lines.append("    " * indent + line)


@functools.lru_cache(maxsize=64)
def compiled_code(code: str, filename: str):
    """The code object of generated source, kept: a decoder's `generate` re-records its graph for
    every new static cache, and the replay function then generated differs only in the values of
    its constants (addresses, in the namespace), not in its text; compiling it again cost ~10 ms
    (Llama-1B, ~180 inputs) of each generate's host time on an H100."""
    return compile(code, filename, "exec")


def compile_source(lines: list[str], namespace: dict, filename: str, reuse: bool = False):
    """Execute generated source defining one function; that function, with `.source` set.
    `reuse`: source likely generated again with the same text (`compiled_code` keeps its code;
    a specialized run, built once per sizes, is not kept)."""
    code = "\n".join(lines) + "\n"
    before = set(namespace)
    compiled = compiled_code(code, filename) if reuse else compile(code, filename, "exec")
    exec(compiled, namespace)  # noqa: S102 - our own generated source
    (name,) = [k for k in namespace if k not in before and k != "__builtins__"]
    fn = namespace[name]
    fn.source = code
    return fn


__all__ = ["Source", "TORCH_EMPTY", "compile_source"]
