"""The torch-native operator, BlockSparseLinear and the prefill model on the H200 (marker gpu).

Streams are checked by ordering: a stream is held back by ``torch.cuda._sleep``, then B is rewritten
and the product enqueued on it; the product can only see the new B if it ran on that stream (torch's
streams do not synchronize with the legacy default stream nbspmm used to launch on).
"""
import gc

import ml_dtypes
import numpy as np
import pytest
torch = pytest.importorskip("torch")

import formats
from nbspmm.api import SpMMOperator
from tests.gpu.spmm_checks import block_sparse

pytestmark = pytest.mark.gpu
SLEEP_CYCLES = 200_000_000            # ~0.1 s at the H200's clock: longer than any launch path here
UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
NUMPY_DTYPE = {torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16}


def operator(seed, M=130, K=200, dtype=torch.float16, out_dtype=torch.float32, density=0.5):
    rng = np.random.default_rng(seed)
    A = formats.BCSR.from_scipy(block_sparse(rng, M, K, block_density=density), dtype=NUMPY_DTYPE[dtype])
    out = np.float32 if out_dtype == torch.float32 else NUMPY_DTYPE[dtype]
    return SpMMOperator(A, out_dtype=out), A


def assert_product(C, A, B):
    """Every element within a dtype-aware bound of |A| @ |B| of the float64 product."""
    A64 = A.to_scipy().toarray().astype(np.float64)
    B64 = B.double().cpu().numpy()
    ref, scale = A64 @ B64, np.abs(A64) @ np.abs(B64)
    K = A64.shape[1]
    bound = (2 * UNIT_ROUNDOFF[C.dtype] + K * UNIT_ROUNDOFF[torch.float32]) * scale + 1e-30
    error = np.abs(C.double().cpu().numpy() - ref)
    bad = np.argwhere(~(error <= bound))
    assert bad.size == 0, f"{bad.shape[0]} elements off; first {tuple(bad[0])}: {error[tuple(bad[0])]:.3e} > {bound[tuple(bad[0])]:.3e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("out_16", [False, True])
def test_matmul_answers_in_torch(dtype, out_16):
    out_dtype = dtype if out_16 else torch.float32
    op, A = operator(0, dtype=dtype, out_dtype=out_dtype)
    B = torch.randn(200, 72, device="cuda", dtype=dtype)
    for C in (op @ B, op.matmul(B), op(B)):
        assert isinstance(C, torch.Tensor) and C.dtype == out_dtype and C.device == B.device
        assert C.shape == (130, 72)
        assert_product(C, A, B)


def test_products_run_on_the_current_stream_and_on_stream_override():
    op, A = operator(1, M=1024, K=1024, out_dtype=torch.float16, density=0.3)
    B = torch.randn(1024, 256, device="cuda", dtype=torch.float16)
    new = torch.randn_like(B)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        B.copy_(new)
        C = op @ B                                      # must run after the copy, on `side`
    other = torch.cuda.Stream()
    out = torch.full((1024, 256), float("nan"), device="cuda", dtype=torch.float16)
    with torch.cuda.stream(other):
        torch.cuda._sleep(SLEEP_CYCLES)
        B.copy_(new * 2)
    op(B, out=out, stream=other)                        # the current stream is the default; runs on `other`
    torch.cuda.synchronize()
    assert torch.equal(C, op @ new)
    assert torch.equal(out, op @ (new * 2))


def test_two_operators_on_two_streams_at_once_are_exact():
    ops = [operator(seed, M=2048, K=1024, out_dtype=torch.float16, density=0.3)[0] for seed in (2, 3)]
    Bs = [torch.randn(1024, 512, device="cuda", dtype=torch.float16) for _ in ops]
    expected = [op @ B for op, B in zip(ops, Bs)]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in ops]
    outs = [torch.full_like(e, float("nan")) for e in expected]
    for _ in range(20):                                 # interleaved enqueues: both streams busy at once
        for op, B, out, stream in zip(ops, Bs, outs, streams):
            with torch.cuda.stream(stream):
                op(B, out=out)
    torch.cuda.synchronize()
    for out, e in zip(outs, expected):
        assert torch.equal(out, e)                      # 16-bit output: no split items, deterministic


@pytest.mark.parametrize("N", [96, 100])               # 100: B is first copied to a padded buffer
def test_graph_capture_and_replay(N):
    op, A = operator(4, M=300, K=512, density=0.4)
    B = torch.randn(512, N, device="cuda", dtype=torch.float16)
    C = torch.empty(300, N, device="cuda")
    op(B, out=C)                                        # warm-up: binds (B, C) and encodes B's tensor map
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(B, out=C)
    for _ in range(3):
        B.copy_(torch.randn_like(B))
        C.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_product(C, A, B)


def test_bound_product_keeps_its_buffers_alive():
    op, A = operator(5, M=256, K=256)
    B = torch.randn(256, 64, device="cuda", dtype=torch.float16)
    B_values = B.clone()
    product = op.bind(B, torch.empty(256, 64, device="cuda"))
    del B
    gc.collect()
    garbage = [torch.full((256, 64), float("nan"), device="cuda", dtype=torch.float16) for _ in range(8)]
    C = product()
    torch.cuda.synchronize()
    assert_product(C, A, B_values)
    del garbage


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_block_sparse_linear_forward_state_dict_and_compile(dtype):
    from nbspmm.torch import BlockSparseLinear

    torch.manual_seed(0)
    linear = torch.nn.Linear(200, 130, device="cuda", dtype=dtype)
    layer = BlockSparseLinear.from_dense(linear, sparsity=0.5)
    x = torch.randn(2, 37, 200, device="cuda", dtype=dtype)
    with torch.inference_mode():
        y = layer(x)
    W = layer.to_dense().double()
    ref = x.double() @ W.T + layer.bias.double()
    scale = x.double().abs() @ W.abs().T + layer.bias.double().abs()
    assert y.shape == (2, 37, 130) and y.dtype == dtype
    assert torch.all((y.double() - ref).abs() <= (2 * UNIT_ROUNDOFF[dtype] + 200 * 2.0 ** -24) * scale)
    fresh = BlockSparseLinear(200, 130, dtype=dtype, device="cuda")
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(fresh(x), y)
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x), y)


def test_sparse_model_matches_dense_model_with_the_same_masked_weights():
    from nbspmm.models import masks, qwen

    config = qwen.QwenConfig(layers=2)
    dense = qwen.QwenDecoder(config, device="cuda", dtype=torch.float16, seed=0)
    sparse = qwen.sparsify(dense, 0.9, seed=1)
    combined = qwen.with_attention(sparse, "flex")
    tokens = 512
    x = torch.randn(tokens, config.hidden, device="cuda", dtype=torch.float16)
    table = masks.causal_block_table(tokens // masks.ATTENTION_BLOCK, 0.5, np.random.default_rng(0))
    with torch.inference_mode():
        for model, attention_table in ((sparse, None), (combined, table)):
            got = model(x, attention_table=attention_table).float()
            want = qwen.densified(model)(x, attention_table=attention_table).float()
            assert torch.isfinite(got).all()
            assert (got - want).norm() / want.norm() < 1e-2


def test_fused_rest_steps_match_eager_on_the_gpu():
    """The compiled steps of the model's "rest" (qwen.fused) against the same functions run eagerly."""
    from nbspmm.models import qwen

    g = torch.Generator(device="cuda").manual_seed(0)
    config = qwen.QwenConfig()
    for tokens in (512, 1000):                                    # dynamic shapes: one compile, two token counts
        x = torch.randn(tokens, config.hidden, device="cuda", dtype=torch.float16, generator=g)
        a = torch.randn(tokens, config.hidden, device="cuda", dtype=torch.float16, generator=g)
        weight = torch.rand(config.hidden, device="cuda", dtype=torch.float16, generator=g)
        cos, sin = qwen.rope_tables(tokens, config, "cuda", torch.float16)
        pairs = [(qwen.fused_add_rms_norm(x, a, weight, 1e-6), qwen.add_rms_norm(x, a, weight, 1e-6)),
                 ((qwen.fused_rope_heads(x, config.heads, config.head_dim, cos, sin),),
                  (qwen.rope_heads(x, config.heads, config.head_dim, cos, sin),)),
                 ((qwen.fused_swiglu(x, a),), (qwen.swiglu(x, a),))]
        for got, want in pairs:
            for g_t, w_t in zip(got, want):
                assert g_t.shape == w_t.shape and g_t.dtype == w_t.dtype
                assert torch.allclose(g_t.float(), w_t.float(), rtol=2e-3, atol=2e-3)
    assert {qwen.add_rms_norm, qwen.rope_heads, qwen.swiglu} <= set(qwen._FUSED)
