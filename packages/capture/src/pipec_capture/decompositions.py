"""pipec's own decompositions of Core ATen ops into ops it generates code for.

torch has no decomposition for these (Inductor lowers them with prims of its own); each is
written here in ATen ops that pipec lowers, so AOTAutograd traces it away before lowering.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def masked_scatter(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """`self` where `mask` is false; the k-th true position (in row-major order) takes
    `source.flatten()[k]`. k is a running count of the mask (a scan), then one gather and a
    select: three kernels at most, all generated, no data-dependent shapes. As in eager, `self`
    and `mask` broadcast to one shape, the result's."""
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    self, mask = self.expand(shape), mask.expand(shape)
    if self.numel() == 0 or source.numel() == 0:  # no true position can exist (eager checks counts)
        return self.clone(memory_format=torch.contiguous_format)
    order = torch.cumsum(mask.reshape(-1).to(torch.int64), 0) - 1
    # positions before the first true one (and every false one) read an in-range element
    # that the select below discards
    order = order.clamp(0, source.numel() - 1)
    taken = source.reshape(-1)[order].view(shape)
    return torch.where(mask, taken, self)




# Rows longer than this stay one extern call: sorting by rank compares every pair of a row.
SORT_MAX_ROW = 1024


def sort(self: torch.Tensor, dim: int = -1, descending: bool = False):
    """torch.sort as ranks: an element's place is the number of elements that go before it
    (smaller, or equal and earlier: the stable order; NaN after every number, as in eager), a
    sum over the row of a pairwise comparison that fuses into one reduction kernel; values and
    indices are then scattered to their places (a permutation: no two writes collide).
    O(n^2) work per row, so only rows up to SORT_MAX_ROW; longer ones stay an extern call."""
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.int64, device=self.device)
    n = self.shape[dim]
    if not isinstance(n, int) or n > SORT_MAX_ROW or self.dtype == torch.bool or self.is_complex():
        return NotImplemented
    x = self.movedim(dim, -1)
    mine, other = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, 1] and [..., 1, j]
    position = torch.arange(n, device=self.device)
    earlier = position.view(1, n) < position.view(n, 1)  # j < i
    ahead = _greater(mine, other) if not descending else _greater(other, mine)
    before = ahead | (_same(mine, other) & earlier)
    rank = before.sum(-1)
    values = torch.scatter(x, -1, rank, x)
    indices = torch.scatter(torch.zeros_like(rank), -1, rank, position.expand_as(rank))
    return values.movedim(-1, dim).contiguous(), indices.movedim(-1, dim).contiguous()


def _greater(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a > b in sort order: NaN is greater than every number."""
    if not a.is_floating_point():
        return a > b
    return (a > b) | (a.isnan() & ~b.isnan())


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if not a.is_floating_point():
        return a == b
    return (a == b) | (a.isnan() & b.isnan())


def sort_stable(self: torch.Tensor, *, stable=None, dim: int = -1, descending: bool = False):
    return sort(self, dim, descending)  # the rank order is the stable one either way


def matmul_folded(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """torch.matmul, with [..., m, k] @ [k, n] always folded into one [(...)*m, k] @ [k, n] mm.

    torch folds the batch dims into the rows when the right operand requires grad (a weight) or
    the left one is contiguous; else it broadcasts the right operand and calls bmm. Dynamo traces
    with the model's own tensors, whose weights require grad, so a linear layer on a strided
    input becomes one mm there; torch.export's retrace sees no tensor requiring grad and would
    make it a bmm (export_decompositions uses this for models whose weights require grad)."""
    from torch._decomp.decompositions import matmul as torch_matmul

    if self.dim() >= 3 and other.dim() == 2:
        rows = self.reshape(-1, self.shape[-1])
        return torch.mm(rows, other).view(*self.shape[:-1], other.shape[-1])
    return torch_matmul(self, other)


def weight_norm_backward(grad_w: torch.Tensor, saved_v: torch.Tensor, saved_g: torch.Tensor,
                         saved_norms: torch.Tensor, dim: int):
    """The gradients (of v, of g) of `_weight_norm_interface`, w = v * g / ||v||, the norm taken
    over every dim but `dim`: ATen's formula (WeightNorm.cpp), in fp32 (at least) for reduced-precision
    weights as its kernels accumulate, cast back to the weights' dtypes. torch has no decomposition
    of it, so every weight-normed layer's backward was an extern call: the positional convolution
    of wav2vec2, HuBERT, WavLM and their kin."""
    dim = dim % saved_v.dim()
    others = [d for d in range(saved_v.dim()) if d != dim]
    grad, v, g, norms = (t.to(torch.promote_types(t.dtype, torch.float32))
                         for t in (grad_w, saved_v, saved_g, saved_norms))
    grad_g = (grad * v).sum(others, keepdim=True) / norms
    grad_v = (g / norms) * (grad - v * (grad_g / norms))
    return grad_v.to(saved_v.dtype), grad_g.to(saved_g.dtype)


def _source_index(coord: torch.Tensor, size: int, padding_mode: int, align_corners: bool):
    """(a grid coordinate as a pixel index along a dim of `size`, d index / d coordinate)."""
    if align_corners:
        scale = (size - 1) / 2
        index = (coord + 1) * scale
    else:
        scale = size / 2
        index = ((coord + 1) * size - 1) / 2
    if padding_mode == 1:  # border: clipped to the image, no gradient where clipped
        inside = (index >= 0) & (index <= size - 1)
        return index.clamp(0, size - 1), torch.where(inside, scale, 0.0)
    return index, torch.full_like(index, scale)


def grid_sampler_2d_backward(grad_output: torch.Tensor, input: torch.Tensor, grid: torch.Tensor,  # noqa: A002
                             interpolation_mode: int, padding_mode: int, align_corners: bool, output_mask):
    """The gradients (of input, of grid) of grid_sample in bilinear and nearest mode, with zeros or
    border padding (ATen's GridSampler backward): each corner's gradient added into the input with
    index_put sums (scatters), the grid's from the corners' differences, as gathers. Autograd takes
    the op's own backward before decompositions run, so without this every training step of the
    detectors (RT-DETR, D-FINE, DEIMv2, LW-DETR) called ATen's kernel. Bicubic and reflection stay
    extern calls."""
    if interpolation_mode not in (0, 1) or padding_mode not in (0, 1):
        return NotImplemented
    math = torch.promote_types(input.dtype, torch.float32)
    go, x, g = grad_output.to(math), input.to(math), grid.to(math)
    n, c, h, w = x.shape
    ix, dx = _source_index(g[..., 0], w, padding_mode, align_corners)  # [N, Ho, Wo]
    iy, dy = _source_index(g[..., 1], h, padding_mode, align_corners)
    batch = torch.arange(n, device=x.device).view(n, 1, 1, 1)
    chan = torch.arange(c, device=x.device).view(1, c, 1, 1)
    grad_input = torch.zeros_like(x)

    def corner(xs, ys, weight):
        """(the input at this corner of every sample, zero outside the image; the corner's indices;
        grad_output times the corner's weight, zero outside the image)."""
        inside = ((xs >= 0) & (xs <= w - 1) & (ys >= 0) & (ys <= h - 1)).unsqueeze(1)
        xi = xs.clamp(0, w - 1).to(torch.int64).unsqueeze(1)
        yi = ys.clamp(0, h - 1).to(torch.int64).unsqueeze(1)
        value = torch.where(inside, x[batch, chan, yi, xi], 0.0)
        return value, (batch, chan, yi, xi), torch.where(inside, go * weight.unsqueeze(1), 0.0)

    if interpolation_mode == 1:  # nearest: no gradient for the grid
        _, at, contribution = corner(ix.round(), iy.round(), torch.ones_like(ix))
        grad_input = aten.index_put(grad_input, list(at), contribution, True)
        grad_grid = torch.zeros_like(g)
    else:
        x0, y0 = ix.floor(), iy.floor()
        x1, y1 = x0 + 1, y0 + 1
        corners = ((x0, y0, (x1 - ix) * (y1 - iy)), (x1, y0, (ix - x0) * (y1 - iy)),
                   (x0, y1, (x1 - ix) * (iy - y0)), (x1, y1, (ix - x0) * (iy - y0)))
        values = []
        for xs, ys, weight in corners:
            value, at, contribution = corner(xs, ys, weight)
            grad_input = aten.index_put(grad_input, list(at), contribution, True)
            values.append(value)
        nw, ne, sw, se = values
        wx1, wx0 = (x1 - ix).unsqueeze(1), (ix - x0).unsqueeze(1)
        wy1, wy0 = (y1 - iy).unsqueeze(1), (iy - y0).unsqueeze(1)
        gix = ((ne - nw) * wy1 + (se - sw) * wy0) * go
        giy = ((sw - nw) * wx1 + (se - ne) * wx0) * go
        grad_grid = torch.stack([gix.sum(1) * dx, giy.sum(1) * dy], -1)
    return ((grad_input.to(input.dtype) if output_mask[0] else None), grad_grid.to(grid.dtype))


def histc(self: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:  # noqa: A002
    """torch.histc: how many elements fall in each of `bins` equal-width bins over [min, max]
    (the data's own range where min == max; widened by 1 each way where that is one value).
    ATen's arithmetic (SummaryOps / HistogramKernel): bin = trunc((x - min) * bins / (max - min))
    in the input's type (fp32 at least; integers divide as integers, as CUDA's kernel does), the
    maximum itself in the last bin, elements outside [min, max] not counted. Written as one
    compare-and-sum over (elements, bins), which fuses into one reduction: every mixture-of-experts
    model of transformers counts its tokens per expert with it, an extern call in each step."""
    x = self.reshape(-1)
    if x.numel() == 0:
        return torch.zeros(bins, dtype=self.dtype, device=self.device)
    integral = not self.is_floating_point()
    math = torch.int64 if integral else torch.promote_types(self.dtype, torch.float32)
    x = x.to(math)
    if min == max:
        lo, hi = x.min(), x.max()
        same = lo == hi
        lo, hi = torch.where(same, lo - 1, lo), torch.where(same, hi + 1, hi)
    else:
        cast = int if integral else float
        lo = torch.full((), cast(min), dtype=math, device=self.device)
        hi = torch.full((), cast(max), dtype=math, device=self.device)
    scaled = (x - lo) * bins
    at = torch.div(scaled, hi - lo, rounding_mode="trunc") if integral else (scaled / (hi - lo)).to(torch.int64)
    at = torch.where(at == bins, bins - 1, at)  # the maximum itself
    inside = (x >= lo) & (x <= hi)
    hits = (at.unsqueeze(1) == torch.arange(bins, device=self.device)) & inside.unsqueeze(1)
    return hits.sum(0).to(self.dtype)


def cdist_forward(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode=None):
    """torch.cdist's kernel: the p-norm distance of every row of x1 to every row of x2, as one
    reduction over the rows' pairwise differences (the [..., P, R, M] differences fuse into it,
    never stored). p = 2 goes through the matrix product where ATen's does (`_euclidean_dist`:
    compute_mode 1, or 0 with either side over 25 rows), so the results are eager's; p = 0 counts
    the differing coordinates, p = inf takes their largest."""
    r1, r2 = x1.shape[-2], x2.shape[-2]
    mode = 0 if compute_mode is None else compute_mode
    if p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))):
        return aten._euclidean_dist(x1, x2)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if p == 0:
        return (diff != 0).sum(-1).to(x1.dtype)
    if p == float("inf"):
        return diff.abs().amax(-1) if diff.shape[-1] else diff.sum(-1)
    if p == 1:
        return diff.abs().sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    return diff.abs().pow(p).sum(-1).pow(1.0 / p)


def cdist_backward(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, p: float, dist: torch.Tensor):
    """The gradient of cdist's distances with respect to x1 (ATen's formulas, per p): each pair's
    d dist / d x1 from the pair's difference, weighted by the pair's gradient and summed over x2's
    rows, one reduction. A pair at distance 0 passes no gradient (nor, for p < 1, a coordinate
    that does not differ), as in ATen; p = inf passes it to the coordinates that reach the
    maximum. (x2's gradient is this with the two sides swapped: autograd's own call.)"""
    if p == 0:
        return torch.zeros_like(x1)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    pair = dist.unsqueeze(-1)
    zero = torch.zeros((), dtype=diff.dtype, device=diff.device)
    if p == 1:
        term = diff.sign()
    elif p == 2:
        term = torch.where(pair == 0, zero, diff / pair)
    elif p == float("inf"):
        term = diff.sign() * (diff.abs() == pair)
    else:
        term = diff.sign() * diff.abs().pow(p - 1) / pair.pow(p - 1)
        dead = (pair == 0) | (diff == 0) if p < 1 else pair == 0
        term = torch.where(dead, zero, term)
    out = (grad.unsqueeze(-1) * term).sum(-2)
    return out.sum_to_size(x1.shape) if out.shape != x1.shape else out


# Lanczos' approximation of the gamma function, g = 7, nine terms (Numerical Recipes' choice):
# relative error about 1e-15, below float32's and float64's rounding of the rest
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)
_HALF_LOG_TWO_PI = 0.9189385332046727


def _special_math(self: torch.Tensor):
    """(self in the dtype the series run in, the result's dtype): float32 at least."""
    return self.to(torch.promote_types(self.dtype, torch.float32)), self.dtype


def _sinc_cos_pi(r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sin(pi r) / (pi r), cos(pi r)) for |r| <= 0.5 as Taylor polynomials in (pi r)^2 (error below
    1e-9 there). The reflection formulas divide by sin(pi r) near the poles: written as pi r times
    this quotient, it stays accurate relative to its value however small r is (a GPU's fast sine
    is accurate only in absolute terms), subnormal r included."""
    y = torch.pi * r
    y2 = y * y
    sinc = 1 + y2 * (-1 / 6 + y2 * (1 / 120 + y2 * (-1 / 5040 + y2 * (1 / 362880 + y2 * (-1 / 39916800
                                                                                    + y2 / 6227020800)))))
    cos = 1 + y2 * (-1 / 2 + y2 * (1 / 24 + y2 * (-1 / 720 + y2 * (1 / 40320 + y2 * (-1 / 3628800 + y2 * (
        1 / 479001600 - y2 / 87178291200))))))
    return sinc, cos


def _lgamma_from_half(x: torch.Tensor) -> torch.Tensor:
    """log Gamma(x) for x >= 0.5 (Lanczos)."""
    z = x - 1
    total = torch.full_like(z, _LANCZOS[0])
    for i, c in enumerate(_LANCZOS[1:], 1):
        total = total + c / (z + i)
    t = z + 7.5
    return _HALF_LOG_TWO_PI + (z + 0.5) * torch.log(t) - t + torch.log(total)


def lgamma(self: torch.Tensor):
    """log |Gamma(x)| as arithmetic on x (Lanczos' series, the reflection formula below 0.5),
    which fuses into its neighbours' kernels. Inductor calls libdevice's lgamma, which Triton's
    CPU interpreter cannot run, so pipec had no lowering and lgamma was an extern call. Poles (0
    and the negative integers) and +-inf give inf, as eager."""
    if not self.is_floating_point():
        return NotImplemented
    x, dtype = _special_math(self)
    left = x < 0.5
    right = _lgamma_from_half(torch.where(left, 1 - x, x))
    r = x - torch.round(x)  # |sin(pi x)| = |sin(pi r)|, exact where pi * x would not be
    # log(pi / |sin(pi r)|) = -log|r| - log(sin(pi r) / (pi r)): no quotient to overflow, and r is
    # exact where pi r would round (a subnormal x)
    reflected = -torch.log(r.abs()) - torch.log(_sinc_cos_pi(r)[0]) - right
    out = torch.where(left, reflected, right)
    return torch.where(x.isinf(), torch.inf, out).to(dtype)


def digamma(self: torch.Tensor):
    """d/dx log Gamma(x) (lgamma's gradient) as arithmetic: six steps of psi(x) = psi(x + 1) - 1/x,
    then the asymptotic series at x + 6, and the reflection formula below 0.5. Eager's values at
    its special points: -inf at 0, inf at -0, nan at the negative integers and -inf."""
    if not self.is_floating_point():
        return NotImplemented
    x, dtype = _special_math(self)
    left = x < 0.5
    y = torch.where(left, 1 - x, x)
    steps = sum(1 / (y + k) for k in range(6))
    w = y + 6
    w2 = 1 / (w * w)
    series = torch.log(w) - 0.5 / w - w2 * (1 / 12 - w2 * (1 / 120 - w2 * (1 / 252 - w2 * (1 / 240 - w2 / 132))))
    psi = series - steps
    r = x - torch.round(x)  # x's distance to an integer: pi / tan(pi x) = cos(pi r) / (r sinc(pi r))
    sinc, cos = _sinc_cos_pi(r)
    out = torch.where(left, psi - cos / (r * sinc), psi)
    out = torch.where((x < 0) & (r == 0), torch.nan, out)  # the negative integers (and -inf)
    out = torch.where(x == 0, torch.where(1 / x < 0, torch.inf, -torch.inf), out)  # 1 / -0 is -inf
    return torch.where(x == torch.inf, torch.inf, out).to(dtype)


DECOMPOSITIONS = {
    aten.lgamma.default: lgamma,
    aten.digamma.default: digamma,
    aten._cdist_forward.default: cdist_forward,
    aten._cdist_backward.default: cdist_backward,
    aten.grid_sampler_2d_backward.default: grid_sampler_2d_backward,
    aten.histc.default: histc,
    aten._weight_norm_interface_backward.default: weight_norm_backward,
    aten.masked_scatter.default: masked_scatter,
    aten.sort.default: sort,
    aten.sort.stable: sort_stable,
}
