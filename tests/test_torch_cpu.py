"""nbspmm.pruning and nbspmm.torch.BlockSparseLinear on the CPU: masks, structure, state_dict, the
custom op's fake shapes and the forward's math through the CPU reference path (no GPU)."""
import numpy as np
import pytest

from nbspmm import pruning

torch = pytest.importorskip("torch")
from nbspmm.torch import BlockSparseLinear  # noqa: E402


def test_magnitude_mask_keeps_the_largest_blocks():
    weight = np.zeros((6, 8))
    weight[0:2, 0:4] = 5.0         # block (0, 0): the largest
    weight[4:6, 4:8] = 3.0         # block (2, 1)
    weight[2:4, 0:4] = 1.0         # block (1, 0)
    mask = pruning.magnitude_block_mask(weight, sparsity=0.5, block=(2, 4))
    assert mask.shape == (3, 2)
    assert mask.tolist() == [[True, False], [True, False], [False, True]]
    norms = pruning.block_norms(weight, (2, 4))
    assert norms[0, 0] == pytest.approx(np.sqrt(8 * 25.0))


def test_mask_counts_and_ragged_edges():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((130, 70))                  # 3 × 2 blocks of 64, the edges partial
    for sparsity, kept in ((0.0, 6), (0.5, 3), (0.9, 1)):
        mask = pruning.magnitude_block_mask(weight, sparsity, (64, 64))
        assert mask.shape == (3, 2) and mask.sum() == kept
    mask = np.array([[True, False], [False, False], [False, True]])
    pruned = pruning.apply_block_mask(weight, mask, (64, 64))
    assert np.array_equal(pruned[:64, :64], weight[:64, :64]) and not pruned[:64, 64:].any()
    assert np.array_equal(pruned[128:, 64:], weight[128:, 64:]) and not pruned[64:128].any()
    with pytest.raises(ValueError, match="block mask of shape"):
        pruning.apply_block_mask(weight, mask[:2], (64, 64))
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        pruning.magnitude_block_mask(weight, 1.0)


def test_per_row_mask_keeps_each_block_rows_largest():
    """per_row=True: every block row keeps round((1 - sparsity) · block columns) blocks, its largest —
    where the global mask keeps two of block row 0's and none of row 1's."""
    weight = np.zeros((4, 12))
    weight[0:2] = np.repeat([9.0, 8.0, 7.0], 4)                 # block row 0: norms 9 > 8 > 7 (x sqrt 8)
    weight[2:4] = np.repeat([1.0, 3.0, 2.0], 4)                 # block row 1: 1 < 3 > 2
    assert pruning.magnitude_block_mask(weight, 2 / 3, (2, 4)).tolist() == [[True, True, False], [False, False, False]]
    mask = pruning.magnitude_block_mask(weight, 2 / 3, (2, 4), per_row=True)
    assert mask.tolist() == [[True, False, False], [False, True, False]]
    wide = pruning.magnitude_block_mask(np.random.default_rng(3).standard_normal((256, 1280)), 0.9, (64, 64), per_row=True)
    assert (wide.sum(axis=1) == 2).all()                       # round(0.1 · 20) per block row
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        pruning.magnitude_block_mask(weight, 1.0, (2, 4), per_row=True)


def test_from_dense_per_row():
    linear = masked_linear(320, 640)
    layer = BlockSparseLinear.from_dense(linear, sparsity=0.5, block=(64, 64), per_row=True)
    assert (layer.block_mask.sum(dim=1) == 5).all()
    mask = pruning.magnitude_block_mask(linear.weight.detach().numpy(), 0.5, (64, 64), per_row=True)
    assert layer.block_mask.numpy().tolist() == mask.tolist()


def masked_linear(out_features=192, in_features=136, seed=0):
    torch.manual_seed(seed)
    linear = torch.nn.Linear(in_features, out_features)
    return linear


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_from_dense_is_the_pruned_weight(dtype):
    linear = masked_linear()
    layer = BlockSparseLinear.from_dense(linear, sparsity=0.5, block=(64, 64), dtype=dtype)
    mask = pruning.magnitude_block_mask(linear.weight.detach().numpy(), 0.5, (64, 64))
    assert layer.block_mask.numpy().tolist() == mask.tolist()
    assert layer.blocks.shape == (int(mask.sum()), 64, 64) and layer.blocks.dtype == dtype
    expected = pruning.apply_block_mask(linear.weight.detach().to(dtype).float().numpy(), mask, (64, 64))
    assert np.array_equal(layer.to_dense().float().numpy(), expected)
    assert torch.equal(layer.bias, linear.bias.detach().to(dtype))


def test_from_block_mask_and_forward_reference_with_leading_dims():
    weight = torch.randn(128, 192, dtype=torch.float16)
    mask = np.array([[True, False, True], [False, True, False]])
    bias = torch.randn(128)
    layer = BlockSparseLinear.from_block_mask(weight, mask, (64, 64), bias=bias)
    x = torch.randn(2, 3, 192, dtype=torch.float16)
    y = layer(x)
    assert y.shape == (2, 3, 128) and y.dtype == torch.float16
    dense = torch.as_tensor(pruning.apply_block_mask(weight.float().numpy(), mask, (64, 64)))
    expected = x.double() @ dense.double().T + bias.half().double()
    bound = (x.double().abs() @ dense.double().abs().T + bias.abs().double()) * 2 ** -9 + 1e-3
    assert torch.all((y.double() - expected).abs() <= bound)
    with pytest.raises(ValueError, match="in_features"):
        layer(torch.randn(4, 100, dtype=torch.float16))
    with pytest.raises(RuntimeError):
        BlockSparseLinear.from_block_mask(weight, mask[:1], (64, 64))


def test_state_dict_round_trip_rebuilds_the_structure():
    layer = BlockSparseLinear.from_dense(masked_linear(), sparsity=0.7)
    state = layer.state_dict()
    assert set(state) == {"block_mask", "blocks", "bias"}
    fresh = BlockSparseLinear(136, 192)
    fresh._operator = "stale"
    fresh.load_state_dict(state)
    assert fresh._operator is None                              # rebuilt lazily from the loaded buffers
    assert torch.equal(fresh.to_dense(), layer.to_dense()) and torch.equal(fresh.bias, layer.bias)
    bcsr = fresh.sparse_format()
    assert bcsr.nnzb == int(layer.block_mask.sum())
    assert np.array_equal(bcsr.to_scipy().toarray(), layer.to_dense().float().numpy())


def test_inference_mode_and_module_structure():
    model = torch.nn.Sequential(BlockSparseLinear.from_dense(masked_linear(), 0.5), torch.nn.ReLU())
    assert len(list(model.buffers())) == 3 and not list(model.parameters())
    with torch.inference_mode():
        y = model(torch.randn(5, 136, dtype=torch.float16))
    assert y.shape == (5, 192)
    assert "kept_blocks=4/9" in repr(model[0])


def test_custom_op_fake_shapes_and_compiled_graph_keeps_the_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    layer = BlockSparseLinear.from_dense(masked_linear(), 0.5)
    with FakeTensorMode():
        x = torch.empty(7, 2, 136, dtype=torch.float16)
        y = torch.ops.nbspmm.block_sparse_linear(x, torch.empty(3, 64, 64, dtype=torch.float16), None,
                                                 layer.layer_id, 192, layer.linear)
        assert y.shape == (7, 2, 192) and y.dtype == torch.float16
    graphs = []

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    x = torch.randn(4, 136, dtype=torch.float16)
    assert torch.equal(compiled(x), layer(x))
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert any(target.startswith("nbspmm.block_sparse_linear") for target in targets), targets
    torch.library.opcheck(torch.ops.nbspmm.block_sparse_linear.default,
                          (x, layer.blocks, layer.bias, layer.layer_id, 192, layer.linear))
    no_bias = BlockSparseLinear.from_dense(masked_linear().weight, 0.5, dtype=torch.bfloat16)
    x3 = torch.randn(2, 3, 136, dtype=torch.bfloat16)         # leading dims; the fake's strides = the real ones
    torch.library.opcheck(torch.ops.nbspmm.block_sparse_linear.default,
                          (x3, no_bias.blocks, None, no_bias.layer_id, 192, no_bias.linear))


def test_linear_orientation_matches_and_its_fake_strides_are_the_real_ones():
    """orientation="linear" (y = x @ Wᵀ in the kernel): the same values as the default orientation, a
    contiguous y, and the custom op's fake agreeing with it (opcheck compares strides); a bad name is
    refused."""
    linear = masked_linear()
    layer = BlockSparseLinear.from_dense(linear, 0.5)                       # the default orientation
    transposed = BlockSparseLinear.from_dense(linear, 0.5, orientation="transpose")
    assert "orientation=linear" in repr(layer) and "orientation=transpose" in repr(transposed)
    x = torch.randn(2, 5, 136, dtype=torch.float16)
    y = layer(x)
    assert y.is_contiguous() and y.shape == (2, 5, 192)
    assert torch.equal(y, transposed(x)) and not transposed(x).is_contiguous()
    torch.library.opcheck(torch.ops.nbspmm.block_sparse_linear.default,
                          (x, layer.blocks, layer.bias, layer.layer_id, 192, True))
    with pytest.raises(ValueError, match="orientation"):
        BlockSparseLinear(136, 192, orientation="columns")


def test_kernel_options_reach_the_operator_and_are_not_state(monkeypatch):
    """kernel_options (e.g. the planned item order) go to SpMMOperator as keywords; they are not in the
    state_dict, and the CPU reference path ignores them."""
    from nbspmm import api

    built = []

    class Recorder:
        def __init__(self, fmt, **kwargs):
            built.append(kwargs)

    monkeypatch.setattr(api, "SpMMOperator", Recorder)
    weight = torch.randn(128, 192, dtype=torch.float16)
    layer = BlockSparseLinear.from_dense(weight, 0.5, experimental=True, kernel_options={"item_order": "planned"})
    assert layer.kernel_options == {"item_order": "planned"}
    layer.operator()
    assert built == [{"out_dtype": np.float16, "experimental": True, "item_order": "planned"}]
    assert not any("kernel_options" in key or "item_order" in key for key in layer.state_dict())
    x = torch.randn(3, 192, dtype=torch.float16)
    assert torch.allclose(layer(x).float(), x.float() @ layer.to_dense().float().T, rtol=2e-2, atol=2e-2)
    assert BlockSparseLinear.from_dense(weight, 0.5).kernel_options == {}
