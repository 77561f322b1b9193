"""A third-party pipec code generator that is wrong on purpose (the tests of `pipec bisect`).

It wraps pipec's `triton` code generator and edits the source of the kernels whose
docstring (what codegen says a kernel computes, `exp -> mul -> sigmoid over [4, 8]; ...`)
holds a pattern, so the fault goes in the way any plugin's would: through the `pipec`
entry-point group and the Program's kernel sources.

- `corrupt-fused`: a kernel where a `mul` feeds a `sigmoid` (only a fused kernel holds both)
  adds 0.5 to the sigmoid's argument: wrong only once those two are fused.
- `corrupt-exp`: every kernel computing `exp` computes `exp2` instead: one op is wrong however
  the graph is fused.
- `fail-sigmoid`: raises on a plan holding a `sigmoid` (a compile error, for `pipec minify`).

tests/test_bisect.py makes it an installed distribution (a `.dist-info` beside this file,
on PYTHONPATH) rather than registering it in-process.
"""

import dataclasses

import pipec_ir


class CorruptingCodegen:
    def __init__(self, pattern: str, old: str, new: str):
        self.pattern, self.old, self.new = pattern, old, new

    def generate(self, plan, options):
        from pipec_codegen_triton import TritonCodegen

        program = TritonCodegen().generate(plan, options)
        kernels = tuple(dataclasses.replace(k, source=k.source.replace(self.old, self.new, 1))
                        if self.pattern in _docstring(k.source) else k for k in program.kernels)
        return dataclasses.replace(program, kernels=kernels)


class FailingCodegen:
    def generate(self, plan, options):
        from pipec_codegen_triton import TritonCodegen

        nodes = plan.graph.node_map()
        if any(nodes[n].op == "sigmoid" for k in plan.kernels for n in k.nodes):
            raise NotImplementedError("fail-sigmoid cannot generate sigmoid (on purpose)")
        return TritonCodegen().generate(plan, options)


def _docstring(source: str) -> str:
    start = source.find('"""')
    return source[start:source.find('"""', start + 3)] if start >= 0 else ""


@pipec_ir.hookimpl
def pipec_register(registry):
    registry.add_codegen("corrupt-fused", CorruptingCodegen("mul -> sigmoid", "tl.sigmoid(", "tl.sigmoid(0.5 + "))
    registry.add_codegen("corrupt-exp", CorruptingCodegen("exp", "tl.exp(", "tl.exp2("))
    registry.add_codegen("fail-sigmoid", FailingCodegen())
