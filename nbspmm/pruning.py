"""Magnitude block pruning: which (block rows × block columns) tiles of a weight matrix to keep.

    mask = magnitude_block_mask(W, sparsity=0.9, block=(64, 64))   # bool, (ceil(M/64), ceil(K/64))
    W_pruned = apply_block_mask(W, mask, block=(64, 64))            # the dropped blocks zeroed

A block's score is its Frobenius norm; the ``round((1 - sparsity) · n_blocks)`` blocks of the largest
scores are kept (ties: the lower block index first, so the mask is deterministic). With ``per_row=True``
every block row keeps the same count, ``round((1 - sparsity) · block columns)``, its largest: each block
row is then the same work for the kernel, whose persistent CTAs otherwise drift apart on rows of unequal
length and lose the L2 reuse of the activations between them (NOTES.md: 1.31x on Qwen's down layer).
Edge blocks of a shape that is not a multiple of the block are scored over the elements they hold. Pure NumPy: a torch
weight is read through ``numpy.asarray`` by the caller (``nbspmm.torch``).
"""
from __future__ import annotations

import numpy as np


def block_grid(shape: tuple, block: tuple) -> tuple[int, int]:
    """Block rows and block columns covering a matrix of `shape` (edge blocks partial)."""
    (M, K), (bm, bk) = shape, block
    return -(-M // bm), -(-K // bk)


def _check(weight: np.ndarray, block: tuple) -> None:
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D; got shape {weight.shape}")
    if len(block) != 2 or min(block) <= 0:
        raise ValueError(f"block must be two positive integers; got {block}")


def block_norms(weight, block=(64, 64)) -> np.ndarray:
    """Frobenius norm of every block, float64, shape ``block_grid(weight.shape, block)``."""
    weight = np.asarray(weight, dtype=np.float64)
    _check(weight, block)
    rows, cols = block_grid(weight.shape, block)
    bm, bk = block
    padded = np.zeros((rows * bm, cols * bk))
    padded[:weight.shape[0], :weight.shape[1]] = weight
    squares = (padded ** 2).reshape(rows, bm, cols, bk).sum(axis=(1, 3))
    return np.sqrt(squares)


def keep_largest(scores: np.ndarray, sparsity: float, per_row: bool = False) -> np.ndarray:
    """The bool mask of `scores`' shape keeping the largest, a fraction ``1 - sparsity`` of all of them
    (or, ``per_row``, of each row); ties: the lower index first."""
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity is the fraction of dropped blocks, in [0, 1); got {sparsity}")
    if per_row:
        n_keep = int(round(scores.shape[1] * (1.0 - sparsity)))
        order = np.argsort(-scores, axis=1, kind="stable")[:, :n_keep]
        mask = np.zeros(scores.shape, dtype=bool)
        np.put_along_axis(mask, order, True, axis=1)
        return mask
    n_keep = int(round(scores.size * (1.0 - sparsity)))
    order = np.argsort(-scores.ravel(), kind="stable")        # largest first, lower index first on ties
    mask = np.zeros(scores.size, dtype=bool)
    mask[order[:n_keep]] = True
    return mask.reshape(scores.shape)


def magnitude_block_mask(weight, sparsity: float = 0.9, block=(64, 64), per_row: bool = False) -> np.ndarray:
    """The bool block mask keeping the largest-norm blocks, a fraction ``1 - sparsity`` of them (of each
    block row's with ``per_row``)."""
    return keep_largest(block_norms(weight, block), sparsity, per_row)


def expand_block_mask(mask, block, shape: tuple) -> np.ndarray:
    """The element mask of `shape` that a block mask covers (edge blocks cut to the shape)."""
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != block_grid(shape, block):
        raise ValueError(f"a {shape} matrix in {tuple(block)} blocks needs a block mask of shape "
                         f"{block_grid(shape, block)}; got {mask.shape}")
    full = np.repeat(np.repeat(mask, block[0], axis=0), block[1], axis=1)
    return full[:shape[0], :shape[1]]


def apply_block_mask(weight, mask, block=(64, 64)) -> np.ndarray:
    """A copy of `weight` (as a NumPy array of its dtype) with the blocks outside `mask` zeroed."""
    weight = np.asarray(weight)
    _check(weight, block)
    return np.where(expand_block_mask(mask, block, weight.shape), weight, np.zeros((), weight.dtype))
