"""``BlockSparseLinear``: an ``nn.Linear`` whose weight is block-sparse, multiplied by the BCSR kernel.

    layer = BlockSparseLinear.from_dense(nn.Linear(3584, 18944), sparsity=0.9, block=(64, 64))
    y = layer(x)                      # x: (..., in_features) fp16 / bf16 -> y: (..., out_features)

The module keeps the sparse structure and the values as buffers — ``block_mask`` (bool, block rows ×
block columns), ``blocks`` (kept blocks × BM × BK, row-major block order) and ``bias`` — so its
``state_dict`` is the layer; the GPU operator (``SpMMOperator`` on a ``formats.BCSR``) is built from
them on the first CUDA forward and again after ``load_state_dict`` or ``.to()``.

The forward is the custom op ``torch.ops.nbspmm.block_sparse_linear`` (``torch.library``, with a fake
implementation giving the output's shape and dtype), so ``torch.compile`` keeps it in its graph as one
node instead of tracing into the launch code. On CUDA, by default (``orientation="linear"``), the kernel takes x and
writes y as they lie (``SpMMOperator.linear``). ``orientation="transpose"`` computes ``(W @ xᵀ)ᵀ``
instead: x is transposed into a contiguous (in_features × tokens) B, the kernel writes W @ B, and the
result is handed back as a transposed view — two extra passes over the activations. On the CPU (no kernel) the same op computes
``x @ to_dense()ᵀ`` in float32, the reference the tests check against. Inference only: there is no backward.
"""

import itertools
import weakref
from typing import Optional

import numpy as np
import torch
from torch import nn

import formats
from nbspmm import pruning

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
DEFAULT_BLOCK = (64, 64)
_LAYERS: "weakref.WeakValueDictionary[int, BlockSparseLinear]" = weakref.WeakValueDictionary()
_LAYER_IDS = itertools.count(1)


ORIENTATIONS = ("transpose", "linear")
# x @ Wᵀ in the kernel: in a 28-layer Qwen2.5-7B prefill at 64K tokens (H100, 2026-12-05) the sparse
# model took 2301 ms with it against 2779 ms through (W @ xᵀ)ᵀ and its transposed copies.
DEFAULT_ORIENTATION = "linear"


@torch.library.custom_op("nbspmm::block_sparse_linear", mutates_args=())
def block_sparse_linear(x: torch.Tensor, blocks: torch.Tensor, bias: Optional[torch.Tensor], layer_id: int,
                        out_features: int, linear: bool = False) -> torch.Tensor:
    """y = x @ Wᵀ + bias of the registered layer `layer_id` (`blocks`, `bias`: its buffers, passed so
    that a compiled graph sees what the op reads; `linear`: the layer's orientation is "linear")."""
    layer = _LAYERS[layer_id]
    return layer._forward_cuda(x) if x.is_cuda else layer._forward_reference(x)


@block_sparse_linear.register_fake
def _(x, blocks, bias, layer_id, out_features, linear=False):
    tokens = x.numel() // x.shape[-1] if x.shape[-1] else 0
    shape = (tokens, out_features) if linear else (out_features, tokens)
    return finish_output(x.new_empty(shape), bias, x.shape, linear)


def finish_output(product: torch.Tensor, bias, x_shape, linear: bool = False) -> torch.Tensor:
    """y from the kernel's product — W @ xᵀ (out × tokens, contiguous) transposed, or (`linear`) x @ Wᵀ
    (tokens × out) as it is — plus the bias, with x's leading dims. The CUDA path, the CPU reference and
    the fake all end here, so y's strides are the same in all three — torch.compile relies on the
    fake's strides matching the real ones."""
    y = product if linear else product.T
    if bias is not None:
        y = y + bias
    return y.reshape(*x_shape[:-1], y.shape[1])


class BlockSparseLinear(nn.Module):
    """y = x @ Wᵀ + bias with W (out_features × in_features) stored as the kept BM × BK blocks."""

    def __init__(self, in_features: int, out_features: int, block=DEFAULT_BLOCK, bias: bool = True,
                 dtype=torch.float16, device=None, orientation: str = DEFAULT_ORIENTATION, experimental: bool = False,
                 kernel_options: Optional[dict] = None):
        super().__init__()
        if dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"BlockSparseLinear takes float16 or bfloat16 weights; got {dtype}")
        if orientation not in ORIENTATIONS:
            raise ValueError(f"orientation must be one of {ORIENTATIONS}; got {orientation!r}")
        # "transpose": (W @ xᵀ)ᵀ; "linear": x @ Wᵀ in the kernel (op.linear), no transposed copies.
        self.orientation = orientation
        # Passed to SpMMOperator: admits kernels not yet verified on a GPU (e.g. 128-row blocks).
        self.experimental = bool(experimental)
        # Passed to SpMMOperator as keyword options of the kernel (e.g. item_order="planned"); not state.
        self.kernel_options = dict(kernel_options or {})
        self.in_features, self.out_features, self.block = int(in_features), int(out_features), tuple(block)
        grid = pruning.block_grid((self.out_features, self.in_features), self.block)
        self.register_buffer("block_mask", torch.zeros(grid, dtype=torch.bool, device=device))
        self.register_buffer("blocks", torch.zeros((0, *self.block), dtype=dtype, device=device))
        self.register_buffer("bias", torch.zeros(self.out_features, dtype=dtype, device=device) if bias else None)
        self._operator = None
        self.layer_id = next(_LAYER_IDS)
        _LAYERS[self.layer_id] = self

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def from_block_mask(cls, weight, mask, block=DEFAULT_BLOCK, bias=None, dtype=None,
                        orientation: str = DEFAULT_ORIENTATION, experimental: bool = False,
                        kernel_options: Optional[dict] = None) -> "BlockSparseLinear":
        """The layer of `weight` (out × in, a tensor) keeping the blocks where `mask` is True."""
        weight = torch.as_tensor(weight)
        dtype = dtype or (weight.dtype if weight.dtype in SUPPORTED_DTYPES else torch.float16)
        out_features, in_features = weight.shape
        layer = cls(in_features, out_features, block, bias is not None, dtype, weight.device, orientation,
                    experimental, kernel_options)
        mask = torch.as_tensor(np.asarray(mask, dtype=bool), device=weight.device)
        layer.block_mask.copy_(mask)                   # copy_ checks the mask's shape against the grid
        layer.blocks = _blocks_of(weight.to(dtype), mask, layer.block)
        if bias is not None:
            layer.bias.copy_(torch.as_tensor(bias).to(dtype))
        return layer

    @classmethod
    def from_dense(cls, linear_or_weight, sparsity: float = 0.9, block=DEFAULT_BLOCK, dtype=None,
                   orientation: str = DEFAULT_ORIENTATION, experimental: bool = False, per_row: bool = False,
                   kernel_options: Optional[dict] = None):
        """Magnitude block pruning (``nbspmm.pruning``) of an ``nn.Linear`` or a weight tensor; ``per_row``:
        every block row keeps the same number of blocks (equal work per row for the kernel)."""
        if isinstance(linear_or_weight, nn.Linear):
            weight, bias = linear_or_weight.weight.detach(), linear_or_weight.bias
            bias = None if bias is None else bias.detach()
        else:
            weight, bias = torch.as_tensor(linear_or_weight).detach(), None
        scores = weight.float().cpu().numpy()
        mask = pruning.magnitude_block_mask(scores, sparsity, block, per_row)
        return cls.from_block_mask(weight, mask, block, bias, dtype, orientation, experimental, kernel_options)

    def to_dense(self) -> torch.Tensor:
        """W (out × in) with the dropped blocks zero, in the layer's dtype and device."""
        (rows, cols), (bm, bk) = self.block_mask.shape, self.block
        padded = self.blocks.new_zeros((rows * cols, bm, bk))
        padded[self.block_mask.flatten()] = self.blocks
        dense = padded.reshape(rows, cols, bm, bk).permute(0, 2, 1, 3).reshape(rows * bm, cols * bk)
        return dense[:self.out_features, :self.in_features].contiguous()

    def extra_repr(self) -> str:
        kept = int(self.block_mask.sum())
        return (f"in_features={self.in_features}, out_features={self.out_features}, block={self.block}, "
                f"kept_blocks={kept}/{self.block_mask.numel()}, bias={self.bias is not None}, "
                f"dtype={self.blocks.dtype}, orientation={self.orientation}")

    @property
    def linear(self) -> bool:
        return self.orientation == "linear"

    # -- forward ------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must end in in_features = {self.in_features}; got shape {tuple(x.shape)}")
        return torch.ops.nbspmm.block_sparse_linear(x, self.blocks, self.bias, self.layer_id,
                                                    self.out_features, self.linear)

    def _forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        """The CUDA path on the CPU: W @ xᵀ in float32, rounded to x's dtype, then ``finish_output``."""
        tokens = x.reshape(-1, self.in_features).float()
        product = (self.to_dense().float() @ tokens.T).to(x.dtype)
        return finish_output((product.T if self.linear else product).contiguous(), self.bias, x.shape, self.linear)

    def _forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.blocks.dtype:
            raise TypeError(f"x is {x.dtype} but the layer's weight is {self.blocks.dtype}")
        tokens = x.reshape(-1, self.in_features)
        if self.linear:                                       # x @ Wᵀ in the kernel: x and y as they lie
            return finish_output(self.operator().linear(tokens.contiguous()), self.bias, x.shape, linear=True)
        columns = tokens.T.contiguous()                       # B = xᵀ: in_features × tokens, row-major
        product = self.operator() @ columns                   # W @ xᵀ, out_features × tokens
        return finish_output(product, self.bias, x.shape)     # (W @ xᵀ)ᵀ: a transposed view, + bias

    def operator(self):
        """The GPU operator, built from the buffers on first use."""
        if self._operator is None:
            from nbspmm.api import SpMMOperator

            dtype = self.blocks.dtype
            self._operator = SpMMOperator(self.sparse_format(), out_dtype=_numpy_dtype(dtype),
                                          experimental=self.experimental, **self.kernel_options)
        return self._operator

    def sparse_format(self) -> formats.BCSR:
        """The weight as a ``formats.BCSR`` (host arrays)."""
        mask = self.block_mask.cpu().numpy()
        indptr = np.zeros(mask.shape[0] + 1, dtype=np.int32)
        np.cumsum(mask.sum(axis=1), out=indptr[1:])
        indices = np.nonzero(mask)[1].astype(np.int32)
        blocks = self.blocks.detach().cpu()
        if blocks.dtype == torch.bfloat16:
            data = blocks.view(torch.int16).numpy().view(_numpy_dtype(torch.bfloat16))
        else:
            data = blocks.numpy()
        return formats.BCSR((self.out_features, self.in_features), self.block, indptr, indices,
                            np.ascontiguousarray(data))

    # -- state ---------------------------------------------------------------------------------------
    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        incoming = state_dict.get(prefix + "blocks")
        if incoming is not None:           # another pruning keeps another number of blocks
            self.blocks = torch.empty_like(incoming, device=self.blocks.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._operator = None

    def _apply(self, fn, *args, **kwargs):
        self._operator = None              # .to() / .half() / .cuda(): rebuild from the moved buffers
        return super()._apply(fn, *args, **kwargs)


def _blocks_of(weight: torch.Tensor, mask: torch.Tensor, block) -> torch.Tensor:
    """The kept blocks of `weight`, zero-padded at the edges, in row-major block order."""
    (rows, cols), (bm, bk) = mask.shape, block
    padded = weight.new_zeros((rows * bm, cols * bk))
    padded[:weight.shape[0], :weight.shape[1]] = weight
    tiles = padded.reshape(rows, bm, cols, bk).permute(0, 2, 1, 3).reshape(rows * cols, bm, bk)
    return tiles[mask.flatten()].contiguous()


def _numpy_dtype(dtype: torch.dtype):
    if dtype == torch.bfloat16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np.float16)
