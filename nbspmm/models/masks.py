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


def random_linear_mask(shape: tuple, block: tuple, sparsity: float, rng: np.random.Generator,
                       per_row: bool = False) -> np.ndarray:
    """A bool block mask of a (out × in) weight keeping round((1 - sparsity) · blocks) blocks at
    uniformly random positions (``per_row``: round((1 - sparsity) · block columns) in every block row,
    as ``pruning.magnitude_block_mask(per_row=True)`` keeps)."""
    grid = pruning.block_grid(shape, block)
    if per_row:
        return pruning.keep_largest(rng.random(grid), sparsity, per_row=True)
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
    """The FlexAttention BlockMask of `table` for `tokens` queries and keys, built from the table's block
    lists (``BlockMask.from_kv_blocks``), not by evaluating a mask function on every (query, key) pair:
    ``create_block_mask`` does that, and took 84 ms of a 2-layer prefill at 64K tokens on the H200
    (4.3G pairs)."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    n_blocks = table.shape[0]
    if n_blocks != -(-tokens // block):
        raise ValueError(f"{tokens} tokens need a table of {-(-tokens // block)} blocks; got {n_blocks}")
    kept = np.asarray(table, dtype=bool)
    full = np.tril(kept, k=-1)                     # whole blocks below the diagonal: no mask function runs
    partial = np.eye(n_blocks, dtype=bool)         # the diagonal, masked causally
    if tokens % block:                             # the last query block is cut short: all of it partial
        partial[-1] |= full[-1]
        full[-1] = False

    def on_device(array):                 # (1 batch, 1 head, query blocks[, key blocks]) int32
        return torch.as_tensor(np.ascontiguousarray(array), dtype=torch.int32, device=device)[None, None]

    def block_lists(chosen):
        """(count, indices) per query block, its chosen key blocks first (a stable sort of 'not chosen')."""
        return on_device(chosen.sum(axis=1)), on_device(np.argsort(~chosen, axis=1, kind="stable"))

    kept_on_device = torch.as_tensor(kept, device=device)

    def causal_in_kept_blocks(batch, head, q_index, kv_index):
        # The table too, not only causality: eager flex_attention (the CPU) applies this to every element.
        return (q_index >= kv_index) & kept_on_device[q_index // block, kv_index // block]

    return BlockMask.from_kv_blocks(*block_lists(partial), *block_lists(full), BLOCK_SIZE=block,
                                    mask_mod=causal_in_kept_blocks, seq_lengths=(tokens, tokens))
