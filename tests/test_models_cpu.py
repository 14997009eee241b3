"""nbspmm.models on the CPU at toy sizes: the block masks, the FlexAttention BlockMask against a dense
mask, and the sparse decoder against the dense decoder with the same masked weights."""
import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from nbspmm.models import masks, qwen  # noqa: E402

TOY = qwen.QwenConfig(layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=384)


def test_causal_block_table_keeps_the_diagonal_and_the_asked_fraction():
    table = masks.causal_block_table(40, 0.1, np.random.default_rng(0))
    assert np.all(np.diag(table)) and not np.triu(table, k=1).any()
    assert table.sum() == round(0.1 * 40 * 41 / 2)
    assert masks.causal_block_table(4, 0.0, np.random.default_rng(0)).sum() == 4     # the diagonal at least


def test_random_linear_mask_exact_count():
    mask = masks.random_linear_mask((512, 3584), (64, 64), 0.9, np.random.default_rng(1))
    assert mask.shape == (8, 56) and mask.sum() == round(0.1 * 8 * 56)
    assert len(set(mask.sum(axis=1))) > 1                          # uniform over the weight: rows differ
    per_row = masks.random_linear_mask((3584, 18944), (64, 64), 0.9, np.random.default_rng(1), per_row=True)
    assert per_row.shape == (56, 296) and (per_row.sum(axis=1) == round(0.1 * 296)).all()
    assert per_row.any(axis=0).sum() > 250                         # ... at random columns, not the same ones


def test_flex_block_mask_computes_exactly_the_tables_attention():
    from torch.nn.attention.flex_attention import flex_attention

    tokens, block = 300, 128                    # a partial last block
    table = masks.causal_block_table(3, 0.7, np.random.default_rng(2))
    table[2, 0] = True                          # at least one off-diagonal (full) block
    block_mask = masks.flex_block_mask(table, tokens, "cpu", block)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, tokens, 64) for _ in range(3))
    got = flex_attention(q, k, v, block_mask=block_mask)
    dense = torch.as_tensor(masks.dense_attention_mask(table, tokens, block))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="need a table of"):
        masks.flex_block_mask(table, 500, "cpu", block)


@pytest.mark.parametrize("tokens", [512, 500])
def test_flex_block_mask_lists_the_tables_blocks(tokens):
    """The block lists the fused kernel walks (eager flex applies the mask function everywhere, so the
    test above cannot see them): every kept block and no other; full = kept below the diagonal, except in
    a query block cut short by `tokens`."""
    table = masks.causal_block_table(4, 0.5, np.random.default_rng(4))
    table[3, :3] = True
    block_mask = masks.flex_block_mask(table, tokens, "cpu", 128)
    np.testing.assert_array_equal(block_mask.to_dense()[0, 0].numpy(), table.astype(np.int32))
    full = np.zeros_like(table)
    counts, indices = block_mask.full_kv_num_blocks[0, 0].numpy(), block_mask.full_kv_indices[0, 0].numpy()
    for row in range(4):
        full[row, indices[row, :counts[row]]] = True
    want = np.tril(table, k=-1)
    if tokens % 128:
        want[-1] = False
    np.testing.assert_array_equal(full, want)


def test_sparse_decoder_matches_the_dense_decoder_with_the_same_masked_weights():
    dense = qwen.QwenDecoder(TOY, dtype=torch.bfloat16, seed=0)
    sparse = qwen.sparsify(dense, sparsity=0.5, block=(64, 64), seed=3)
    reference = qwen.densified(sparse)
    x = torch.randn(96, TOY.hidden, dtype=torch.bfloat16)
    with torch.inference_mode():
        got, expected, unpruned = sparse(x).float(), reference(x).float(), dense(x).float()
    error = (got - expected).norm() / expected.norm()
    assert error < 2e-2
    assert (unpruned - expected).norm() / expected.norm() > 10 * error       # the pruning changed the model
    kept = [int(m.block_mask.sum()) for layer in sparse.layers for m in layer.proj.values()]
    totals = [m.block_mask.numel() for layer in sparse.layers for m in layer.proj.values()]
    assert kept == [round(t / 2) for t in totals]


def test_flex_layers_and_timer_sections():
    dense = qwen.QwenDecoder(TOY, dtype=torch.bfloat16, seed=0)
    combined = qwen.with_attention(dense, "flex")
    seen = []

    def timer(name):
        seen.append(name)
        return contextlib.nullcontext()

    tokens = 256
    full = np.tri(2, dtype=bool)                 # every causal block: the same as SDPA's causal mask
    x = torch.randn(tokens, TOY.hidden, dtype=torch.bfloat16)
    with torch.inference_mode():
        got = combined(x, attention_table=full, timer=timer).float()
        expected = dense(x).float()
    assert (got - expected).norm() / expected.norm() < 2e-2
    assert set(seen) == set(qwen.COMPONENTS)
    with pytest.raises(ValueError, match="block mask"):
        combined(x)


def test_qwen_shapes():
    shapes = qwen.QWEN25_7B.linear_shapes()
    assert shapes["q"] == (3584, 3584) and shapes["k"] == (512, 3584) and shapes["down"] == (3584, 18944)
    assert qwen.QWEN25_7B.heads // qwen.QWEN25_7B.kv_heads == 7


def test_dense_causal_attention_maps_each_query_head_to_its_kv_group():
    """Query head h attends with KV head h // (heads / kv_heads), as enable_gqa does; a causal softmax."""
    from nbspmm.models.qwen import dense_causal_attention

    gen = torch.Generator().manual_seed(0)
    heads, kv_heads, tokens, d = 6, 2, 9, 4
    q, k, v = (torch.randn(1, h, tokens, d, generator=gen, dtype=torch.float64) for h in (heads, kv_heads, kv_heads))
    got = dense_causal_attention(q, k, v)
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    for h in range(heads):
        kv = h // (heads // kv_heads)
        scores = (q[0, h] @ k[0, kv].T / d ** 0.5).masked_fill(~causal, float("-inf"))
        torch.testing.assert_close(got[0, h], torch.softmax(scores, -1) @ v[0, kv])


def test_the_rest_steps_compute_the_layer_formulas():
    """The fused steps of "rest" (one function each, compiled on the GPU) against the formulas written out:
    the residual add and the norm, RoPE of the head view, the head merge, SwiGLU; on the CPU eagerly."""
    g = torch.Generator().manual_seed(0)
    tokens, heads, d = 40, 4, 16
    x, a = torch.randn(tokens, heads * d, generator=g), torch.randn(tokens, heads * d, generator=g)
    weight = torch.rand(heads * d, generator=g)
    summed, normed = qwen.fused_add_rms_norm(x, a, weight, 1e-6)
    s = x + a
    assert torch.equal(summed, s)
    assert torch.allclose(normed, s / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * weight, rtol=1e-5, atol=1e-6)
    cos, sin = qwen.rope_tables(tokens, qwen.QwenConfig(head_dim=d), "cpu", torch.float32)
    rotated = qwen.fused_rope_heads(a, heads, d, cos, sin)
    view = a.view(tokens, heads, d).permute(1, 0, 2)
    half = d // 2
    want = torch.cat((view[..., :half] * cos[:, :half] - view[..., half:] * sin[:, half:],
                      view[..., half:] * cos[:, half:] + view[..., :half] * sin[:, :half]), dim=-1)
    assert rotated.shape == (1, heads, tokens, d) and rotated.is_contiguous()
    assert torch.allclose(rotated[0], want, rtol=1e-5, atol=1e-6)
    assert torch.equal(qwen.merge_heads(qwen.split_heads(a, heads, d)), a)
    assert torch.allclose(qwen.fused_swiglu(x, a), x * torch.sigmoid(x) * a, rtol=1e-5, atol=1e-6)
    assert not qwen._FUSED                                       # nothing was compiled for CPU tensors
