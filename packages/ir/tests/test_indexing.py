import sympy
from pipec_ir import Node, TensorType, make_attrs
from pipec_ir.indexing import view_source_index
from pipec_ir.symbolic import index_symbol


def T(*shape):
    return TensorType(tuple(sympy.Integer(s) for s in shape), "float32")


def evaluate(idx, values):
    return tuple(int(sympy.sympify(e).subs(values)) for e in idx)


def brute_check(node, src_shape, ref_fn):
    """Compare the index map with numpy-style view semantics on every element."""
    import itertools

    syms = [index_symbol(f"i{k}") for k in range(len(node.type.shape))]
    mapped = view_source_index(node, tuple(syms), T(*src_shape))
    for point in itertools.product(*[range(int(s)) for s in node.type.shape]):
        got = evaluate(mapped, dict(zip(syms, point)))
        assert got == ref_fn(point), (point, got, ref_fn(point))


def unravel(flat, shape):
    out = []
    for s in reversed(shape):
        out.append(flat % s)
        flat //= s
    return tuple(reversed(out))


def ravel(idx, shape):
    flat = 0
    for i, s in zip(idx, shape):
        flat = flat * s + i
    return flat


def test_reshape_split_and_merge():
    for src, dst in [((4, 6), (24,)), ((24,), (2, 3, 4)), ((2, 3, 4), (6, 4)), ((6, 4), (4, 6)),
                     ((3, 1, 4), (12,)), ((12,), (3, 1, 4)), ((2, 6), (3, 4))]:
        node = Node("v", "reshape", ("x",), T(*dst))
        brute_check(node, src, lambda p, src=src, dst=dst: unravel(ravel(p, dst), src))


def test_permute_expand_slice_select():
    brute_check(Node("v", "permute", ("x",), T(4, 2, 3), make_attrs(dims=(2, 0, 1))), (2, 3, 4),
                lambda p: (p[1], p[2], p[0]))
    brute_check(Node("v", "expand", ("x",), T(3, 4)), (1, 4), lambda p: (0, p[1]))
    brute_check(Node("v", "slice", ("x",), T(3, 4), make_attrs(dim=0, start=1, step=2)), (7, 4),
                lambda p: (1 + 2 * p[0], p[1]))
    brute_check(Node("v", "select", ("x",), T(4), make_attrs(dim=0, index=2)), (3, 4), lambda p: (2, p[0]))


def test_refine_shapes_and_coarse_index_of_contiguous_reshapes():
    import sympy

    from pipec_ir.indexing import coarse_index, refine_shapes

    assert refine_shapes((32, 3072), (2, 16, 3072)) == (2, 16, 3072)
    assert refine_shapes((6, 4), (4, 6)) is None  # a reorder, not a split or merge
    assert refine_shapes((6, 4), (5, 5)) is None  # another numel
    i, j, k = sympy.symbols("i j k", integer=True, nonnegative=True)
    assert coarse_index((i, j, k), (2, 16, 3072), (32, 3072)) == (16 * i + j, k)
    assert coarse_index((i, j, k), (2, 16, 3072), (2, 16, 3072)) == (i, j, k)


def test_coarse_index_of_a_domain_ending_in_size_one_dims():
    # a GEMM with N = 1 keeps its [M, 1] domain: its epilogue values index it as themselves
    import sympy

    from pipec_ir.indexing import coarse_index

    i = sympy.Symbol("i", integer=True, nonnegative=True)
    zero = sympy.Integer(0)
    assert coarse_index((i, zero), (5, 1), (5, 1)) == (i, zero)
    assert coarse_index((i, zero), (5, 1), (5,)) == (i,)
    assert coarse_index((i, zero, zero), (5, 1, 1), (5, 1)) == (i, zero)
    assert coarse_index((i, zero), (5, 2), (5, 1)) is None  # a dim left over that is no size-1 dim
