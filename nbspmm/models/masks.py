"""Block masks of the prefill model: which weight blocks its linear layers keep, and which 128 × 128
blocks of the causal attention matrix FlexAttention computes.

Both are drawn at random with an exact kept count (round(keep · candidates)) from a seeded generator,
so that a benchmark and the test that checks it see the same structure. The tables are NumPy;
``flex_block_mask`` turns an attention table into a ``torch.nn.attention.flex_attention.BlockMask``.
"""
from __future__ import annotations

import numpy as np

from nbspmm import pruning

ATTENTION_BLOCK = 128          # FlexAttention's default tile: 128 query rows × 128 key columns


def random_linear_mask(shape: tuple, block: tuple, sparsity: float, rng: np.random.Generator) -> np.ndarray:
    """A bool block mask of a (out × in) weight keeping round((1 - sparsity) · blocks) blocks at
    uniformly random positions."""
    grid = pruning.block_grid(shape, block)
    total = grid[0] * grid[1]
    keep = int(round((1.0 - sparsity) * total))
    mask = np.zeros(total, dtype=bool)
    mask[rng.choice(total, size=keep, replace=False)] = True
    return mask.reshape(grid)


def causal_block_table(n_blocks: int, keep: float, rng: np.random.Generator) -> np.ndarray:
    """A bool (query block × key block) table over the causal (lower-triangular) blocks keeping
    round(keep · causal blocks) of them: every diagonal block (each query sees itself), the rest drawn
    uniformly among the blocks strictly below the diagonal."""
    causal = n_blocks * (n_blocks + 1) // 2
    target = max(n_blocks, int(round(keep * causal)))
    rows, cols = np.tril_indices(n_blocks, k=-1)
    chosen = rng.choice(rows.size, size=min(target - n_blocks, rows.size), replace=False)
    table = np.eye(n_blocks, dtype=bool)
    table[rows[chosen], cols[chosen]] = True
    return table


def dense_attention_mask(table: np.ndarray, tokens: int, block: int = ATTENTION_BLOCK) -> np.ndarray:
    """The (tokens × tokens) bool mask a table stands for: causal within kept blocks (for references)."""
    blocks = np.repeat(np.repeat(table, block, axis=0), block, axis=1)[:tokens, :tokens]
    return blocks & np.tri(tokens, dtype=bool)


def flex_block_mask(table: np.ndarray, tokens: int, device, block: int = ATTENTION_BLOCK):
    """The FlexAttention BlockMask of `table` for `tokens` queries and keys: the mask function is
    causal within the table's kept blocks; ``create_block_mask`` evaluates it once per element and marks
    the blocks it keeps whole as full blocks (no mask function runs on them in the kernel)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    n_blocks = table.shape[0]
    if n_blocks != -(-tokens // block):
        raise ValueError(f"{tokens} tokens need a table of {-(-tokens // block)} blocks; got {n_blocks}")
    kept = torch.as_tensor(table, device=device)

    def causal_in_kept_blocks(batch, head, q_index, kv_index):
        return (q_index >= kv_index) & kept[q_index // block, kv_index // block]

    return create_block_mask(causal_in_kept_blocks, None, None, tokens, tokens, device=device,
                             BLOCK_SIZE=block)
