"""A decoder with the shapes of Qwen2.5-7B, random weights, for timing and checking a prefill.

    config = QWEN25_7B                         # 28 layers, hidden 3584, 28 / 4 heads of 128, MLP 18944
    dense = QwenDecoder(config, device="cuda")                  # nn.Linear + SDPA
    sparse = sparsify(dense, sparsity=0.9)                      # BlockSparseLinear, same norms
    combined = sparsify(dense, 0.9, attention="flex")           # + FlexAttention with a block mask
    hidden = model(x, attention_table=table)                    # x: (tokens, hidden) -> (tokens, hidden)

One sequence (no batch), no embedding or LM head: the input is the first layer's hidden state. Each
layer is pre-norm: ``x + attention(rms_norm(x))``, then ``x + mlp(rms_norm(x))``; attention has
biased q / k / v projections, rotary position embeddings (theta 1e6), causal grouped-query attention
(7 query heads per KV head); the MLP is SwiGLU ``down(silu(gate(x)) · up(x))``.

``forward(x, timer=...)`` brackets every step in ``timer(name)`` sections — "linear" (the seven
projections), "attention" (the attention kernel), "rest" (norms, RoPE, SwiGLU, residual adds,
reshapes) — which the prefill benchmark fills with CUDA events (``nbspmm.bench.prefill``). On the GPU
the steps of "rest" run as fused kernels (``fused``: torch.compile of each step, shapes dynamic, compiled
on the first forward), in every configuration alike; on the CPU eagerly.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nbspmm.models import masks

LINEAR_NAMES = ("q", "k", "v", "o", "gate", "up", "down")
COMPONENTS = ("attention", "linear", "rest")
INIT_STD = 0.02                      # the usual init scale of transformer weights


@dataclass(frozen=True)
class QwenConfig:
    layers: int = 28
    hidden: int = 3584
    heads: int = 28
    kv_heads: int = 4
    head_dim: int = 128
    intermediate: int = 18944
    rms_eps: float = 1e-6
    rope_theta: float = 1e6

    def linear_shapes(self) -> dict:
        """(out, in) of each projection."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q": (q, self.hidden), "k": (kv, self.hidden), "v": (kv, self.hidden), "o": (self.hidden, q),
                "gate": (self.intermediate, self.hidden), "up": (self.intermediate, self.hidden),
                "down": (self.hidden, self.intermediate)}


QWEN25_7B = QwenConfig()
BIASED = ("q", "k", "v")             # Qwen2 projections with a bias


def no_timer(name):
    return contextlib.nullcontext()


def rope_tables(tokens: int, config: QwenConfig, device, dtype):
    """cos and sin (tokens × head_dim) of rotary embeddings, the halves repeated (rotate-half form)."""
    inverse = 1.0 / config.rope_theta ** (torch.arange(0, config.head_dim, 2, device=device).float() / config.head_dim)
    angles = torch.outer(torch.arange(tokens, device=device).float(), inverse)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x (heads, tokens, head_dim) rotated by position."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


# ---- "the rest": the memory-bound steps between the projections ----------------------------------------
# Each is one function of whole tensors, so that on the GPU it runs as one fused kernel (torch.compile,
# ``fused``) instead of eager's chain of passes over the largest tensors of the step — the fp32 copies
# of an RMSNorm, RoPE's halves and concatenation, SwiGLU's silu then product. On the CPU they run eagerly.
def rms_norm(x, weight, eps: float):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(x.dtype) * weight


def add_rms_norm(x, residual, weight, eps: float):
    """(x + residual, its RMSNorm): the residual add and the next norm in one pass."""
    x = x + residual
    return x, rms_norm(x, weight, eps)


def rope_heads(y, heads: int, head_dim: int, cos, sin):
    """A projection's output (tokens, heads · head_dim) as (1, heads, tokens, head_dim), rotated; reshape:
    a sparse layer's output may be a transposed view ((W @ xᵀ)ᵀ), which view() cannot split."""
    return apply_rope(y.reshape(y.shape[0], heads, head_dim).transpose(0, 1), cos, sin)[None].contiguous()


def split_heads(y, heads: int, head_dim: int):
    return y.reshape(y.shape[0], heads, head_dim).transpose(0, 1)[None]


def merge_heads(a):
    """Attention's output (1, heads, tokens, head_dim) as (tokens, heads · head_dim)."""
    return a[0].transpose(0, 1).reshape(a.shape[2], a.shape[1] * a.shape[3])


def swiglu(gate, up):
    return F.silu(gate) * up


_FUSED = {}


def fused(function):
    """``function`` compiled into fused kernels for CUDA tensors (once, shapes dynamic: one compile serves
    every token count), eager for CPU tensors."""
    def call(first, *args):
        if not first.is_cuda:
            return function(first, *args)
        compiled = _FUSED.get(function)
        if compiled is None:
            compiled = _FUSED[function] = torch.compile(function, dynamic=True, fullgraph=True)
        return compiled(first, *args)
    call.__name__ = call.__qualname__ = f"fused_{function.__name__}"
    call.__doc__ = function.__doc__
    return call


fused_rms_norm, fused_add_rms_norm, fused_rope_heads, fused_swiglu = (
    fused(rms_norm), fused(add_rms_norm), fused(rope_heads), fused(swiglu))


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, x):
        return fused_rms_norm(x, self.weight, self.eps)


def _linear(shape, name, device, dtype):
    layer = nn.Linear(shape[1], shape[0], bias=name in BIASED, device=device, dtype=dtype)
    nn.init.normal_(layer.weight, std=INIT_STD)
    if layer.bias is not None:
        nn.init.normal_(layer.bias, std=INIT_STD)
    return layer


class DecoderLayer(nn.Module):
    def __init__(self, config: QwenConfig, device=None, dtype=torch.float16):
        super().__init__()
        self.config = config
        self.input_norm = RMSNorm(config.hidden, config.rms_eps, device, dtype)
        self.post_attention_norm = RMSNorm(config.hidden, config.rms_eps, device, dtype)
        self.proj = nn.ModuleDict({name: _linear(shape, name, device, dtype)
                                   for name, shape in config.linear_shapes().items()})
        self.attention = "sdpa"          # or "flex": FlexAttention with the forward's block mask

    def forward(self, x, cos, sin, block_mask=None, timer=no_timer):
        c, p = self.config, self.proj
        post = self.post_attention_norm
        with timer("rest"):
            h = self.input_norm(x)
        with timer("linear"):
            q, k, v = p["q"](h), p["k"](h), p["v"](h)
        with timer("rest"):      # (tokens, heads · d) -> (1, heads, tokens, d)
            q = fused_rope_heads(q, c.heads, c.head_dim, cos, sin)
            k = fused_rope_heads(k, c.kv_heads, c.head_dim, cos, sin)
            v = split_heads(v, c.kv_heads, c.head_dim)
        with timer("attention"):
            a = self.attend(q, k, v, block_mask)
        with timer("rest"):
            a = merge_heads(a)
        with timer("linear"):
            a = p["o"](a)
        with timer("rest"):
            x, h = fused_add_rms_norm(x, a, post.weight, post.eps)
        with timer("linear"):
            gate, up = p["gate"](h), p["up"](h)
        with timer("rest"):
            h = fused_swiglu(gate, up)
        with timer("linear"):
            h = p["down"](h)
        with timer("rest"):
            x = x + h
        return x

    def attend(self, q, k, v, block_mask):
        if self.attention == "sdpa":
            return dense_causal_attention(q, k, v)
        if block_mask is None:
            raise ValueError("FlexAttention layers need the forward's block mask (attention_table)")
        return flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)


def dense_causal_attention(q, k, v):
    """Causal GQA attention with SDPA's fused kernels. K and V are expanded to the query heads first:
    with ``enable_gqa`` SDPA fell back to its math kernel at 64K tokens on the H200 (448 GiB of scores for
    28 heads), so on the GPU the math kernel is excluded and a shape no fused kernel takes is an error."""
    group = q.shape[1] // k.shape[1]
    q = q.contiguous()   # the model's q (RoPE of a transposed view) found no fused kernel on the H200
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    if not q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


_COMPILED_FLEX = {}


def flex_attention(q, k, v, **options):
    """FlexAttention, compiled on the GPU (its fused kernel; eager is a slow reference)."""
    from torch.nn.attention.flex_attention import flex_attention as flex

    if not q.is_cuda:
        return flex(q, k, v, **options)
    if "compiled" not in _COMPILED_FLEX:
        _COMPILED_FLEX["compiled"] = torch.compile(flex, dynamic=False)
    return _COMPILED_FLEX["compiled"](q, k, v, **options)


class QwenDecoder(nn.Module):
    def __init__(self, config: QwenConfig = QWEN25_7B, device=None, dtype=torch.float16, seed: int = 0):
        super().__init__()
        self.config = config
        torch.manual_seed(seed)
        self.layers = nn.ModuleList(DecoderLayer(config, device, dtype) for _ in range(config.layers))
        self.norm = RMSNorm(config.hidden, config.rms_eps, device, dtype)

    def forward(self, x, attention_table=None, timer=no_timer):
        """Final hidden state (tokens × hidden) of the input hidden state x (tokens × hidden).
        `attention_table`: the kept-block table of FlexAttention layers (``masks.causal_block_table``)."""
        tokens = x.shape[0]
        cos, sin = rope_tables(tokens, self.config, x.device, x.dtype)
        block_mask = None
        if attention_table is not None:
            block_mask = masks.flex_block_mask(attention_table, tokens, x.device)
        for layer in self.layers:
            x = layer(x, cos, sin, block_mask, timer)
        with timer("rest"):
            return self.norm(x)


def sparsify(dense: QwenDecoder, sparsity: float = 0.9, block=(64, 64), attention: str = "sdpa",
             seed: int = 0, orientation: str = "linear", experimental: bool = False,
             per_row: bool = False, kernel_options: dict | None = None) -> QwenDecoder:
    """A model sharing dense's norms whose projections are BlockSparseLinear, each keeping a random
    (seeded) fraction 1 - sparsity of its blocks (``per_row``: of each block row's); `attention` "sdpa"
    or "flex"; `orientation` the layers' (BlockSparseLinear: "transpose" or "linear"); `experimental`
    theirs (BlockSparseLinear), as are `kernel_options` (SpMMOperator keyword options, e.g.
    ``{"item_order": "planned"}``)."""
    from nbspmm.torch import BlockSparseLinear

    rng = np.random.default_rng(seed)
    model = with_attention(dense, attention)
    for layer in model.layers:
        sparse = nn.ModuleDict()
        for name, linear in layer.proj.items():
            mask = masks.random_linear_mask(tuple(linear.weight.shape), block, sparsity, rng, per_row)
            bias = None if linear.bias is None else linear.bias.detach()
            sparse[name] = BlockSparseLinear.from_block_mask(linear.weight.detach(), mask, block, bias,
                                                             orientation=orientation, experimental=experimental,
                                                             kernel_options=kernel_options)
        layer.proj = sparse
    return model


def with_attention(model: QwenDecoder, attention: str) -> QwenDecoder:
    """The same layers (shared weights) with another attention: a shallow copy of the module tree."""
    copy = QwenDecoder.__new__(QwenDecoder)
    nn.Module.__init__(copy)
    copy.config, copy.norm = model.config, model.norm
    copy.layers = nn.ModuleList()
    for layer in model.layers:
        twin = DecoderLayer.__new__(DecoderLayer)
        nn.Module.__init__(twin)
        twin.config, twin.input_norm, twin.post_attention_norm = layer.config, layer.input_norm, layer.post_attention_norm
        twin.proj, twin.attention = layer.proj, attention
        copy.layers.append(twin)
    return copy


def densified(sparse: QwenDecoder) -> QwenDecoder:
    """The dense model with the sparse model's masked weights (nn.Linear of ``to_dense()``), same norms
    and attention: the reference the sparse model is checked against."""
    copy = with_attention(sparse, "sdpa")
    for twin, layer in zip(copy.layers, sparse.layers):
        twin.attention = layer.attention
        twin.proj = nn.ModuleDict()
        for name, module in layer.proj.items():
            weight = module.to_dense()
            linear = nn.Linear(weight.shape[1], weight.shape[0], bias=module.bias is not None,
                               device=weight.device, dtype=weight.dtype)
            with torch.no_grad():
                linear.weight.copy_(weight)
                if module.bias is not None:
                    linear.bias.copy_(module.bias)
            twin.proj[name] = linear
    return copy
