"""Bad input fails early with a message naming the wrapper (or argument) and the rule: at kernel compile
time for device wrappers (never an NVVM / ptxas dump), at call time for host factories, and before the
driver for tensor maps (checked with fake ``__cuda_array_interface__`` objects, no GPU)."""
import numpy as np
import pytest
from numba import cuda, types, uint32, uint64

import ptx_snippets as ps
from ptx_snippets.inspect import compile_for_hopper

SIG = (types.uint64[::1], types.uint32)


def compile_statement(statement, sig=SIG):
    namespace = {"cuda": cuda, "np": np, "ps": ps, "uint32": uint32, "uint64": uint64,
                 "mma64": ps.make_wgmma(64, "bf16"), "zeros64": ps.make_zero_accumulator(64),
                 "zeros32": ps.make_zero_accumulator(32), "store64": ps.make_fragment_store(64, "f32")}
    source = ("def kernel(out, x):\n"
              "    bars = cuda.shared.array(1, dtype=np.uint64)\n"
              "    bar = ps.shared_addr(bars)\n"
              f"    {statement}\n")
    exec(source, namespace)
    return compile_for_hopper(namespace["kernel"], sig)


DEVICE_ERRORS = [
    ("ps.wgmma_wait_group(x)", r"wgmma_wait_group: N must be a compile-time integer literal"),
    ("ps.wgmma_wait_group(8)", r"wgmma_wait_group: N must be in \[0, 7\], got 8"),
    ("ps.bulk_wait_group_read(x)", r"bulk_wait_group_read: N must be a compile-time integer literal"),
    ("ps.bulk_wait_group(-1)", r"bulk_wait_group: N must be in"),
    ("ps.setmaxnreg_inc(x)", r"setmaxnreg_inc: N must be a compile-time integer literal"),
    ("ps.setmaxnreg_inc(100)", r"setmaxnreg_inc: N must be a multiple of 8, got 100"),
    ("ps.setmaxnreg_dec(16)", r"setmaxnreg_dec: N must be in \[24, 256\], got 16"),
    ("ps.named_barrier_sync(16, 64)", r"named_barrier_sync: barrier_id must be in \[0, 15\], got 16"),
    ("ps.named_barrier_arrive(1, 48)", r"named_barrier_arrive: nthreads must be a multiple of 32, got 48"),
    ("ps.shared_addr(3)", r"shared_addr: arr must be an array"),
    ("ps.global_addr(x)", r"global_addr: arr must be an array"),
    ("ps.mbarrier_init(1.5, 1)", r"mbarrier_init: bar must be an integer, got float64"),
    ("ps.mbarrier_wait(bar, out)", r"mbarrier_wait: parity must be an integer"),
    ("ps.tma_load_2d(bar, x, 0, 0, bar)", r"tma_load_2d: tmap must be a 64-bit integer \(a global address from global_addr"),
    ("ps.bulk_copy_g2s(bar, uint32(0), 16, bar)", r"bulk_copy_g2s: src must be a 64-bit integer"),
    ("ps.tensormap_prefetch(bar)", r"tensormap_prefetch: tmap must be a 64-bit integer"),
    ("acc = mma64(zeros32(), uint64(0), uint64(0), x)",
     r"wgmma_m64n64k16_f32_bf16_smem_ta0_tb0: acc must be UniTuple\(float32 x 32\)"),
    ("acc = mma64(zeros64(), bar, uint64(0), x)", r"a_desc must be a 64-bit integer"),
    ("store64(zeros64(), out, 0, 0, x)", r"make_fragment_store\(64, 'f32'\): out must be a 2-D array"),
]


@pytest.mark.parametrize("statement,message", DEVICE_ERRORS, ids=[s for s, _ in DEVICE_ERRORS])
def test_device_wrapper_errors_name_wrapper_and_rule(statement, message):
    with pytest.raises(ps.PTXUsageError, match=message):
        compile_statement(statement)


def test_fragment_store_checks_dtype_and_layout():
    store = ps.make_fragment_store(64, "bf16")
    zeros = ps.make_zero_accumulator(64)

    def kernel(out):
        store(zeros(), out, 0, 0, cuda.threadIdx.x)

    with pytest.raises(ps.PTXUsageError, match=r"make_fragment_store\(64, 'bf16'\): out must have dtype uint16"):
        compile_for_hopper(kernel, (types.float32[:, ::1],))
    with pytest.raises(ps.PTXUsageError, match=r"out must be C-contiguous"):
        compile_for_hopper(kernel, (types.Array(types.uint16, 2, "A"),))


HOST_ERRORS = [
    (lambda: ps.make_wgmma(12), r"make_wgmma: n must be a multiple of 8, got 12"),
    (lambda: ps.make_wgmma(264), r"make_wgmma: n must be in \[8, 256\], got 264"),
    (lambda: ps.make_wgmma(64, "f32"), r"make_wgmma: dtype must be one of"),
    (lambda: ps.make_wgmma(64, "f16", a="global"), r"make_wgmma: a must be 'smem'"),
    (lambda: ps.make_wgmma(64, "f16", trans_b=2), r"make_wgmma: trans_b must be one of \[0, 1\], got 2"),
    (lambda: ps.make_wgmma(64, "f16", a="reg", trans_a=1), r"A from registers has no transpose"),
    (lambda: ps.make_zero_accumulator(7), r"make_zero_accumulator: n must be"),
    (lambda: ps.make_fragment_store(64, "f64"), r"make_fragment_store: out_kind must be one of"),
    (lambda: ps.make_fragment_atomic_add(300), r"make_fragment_atomic_add: n must be in"),
    (lambda: ps.accumulator_layout(4), r"accumulator_layout: n must be in"),
    (lambda: ps.operand_layout(64, 64, major="MN", swizzle="128B", elem_bytes=1), r"only for 16-bit types"),
    (lambda: ps.swizzle_bytes(np.zeros(100, np.uint8), "128B"), r"whole number of 128-byte rows"),
]


@pytest.mark.parametrize("call,message", HOST_ERRORS, ids=[m for _, m in HOST_ERRORS])
def test_host_factory_errors(call, message):
    with pytest.raises(ps.PTXUsageError, match=message):
        call()


# ---- tensor maps ----------------------------------------------------------------------------------------

class FakeDeviceArray:
    """Just a __cuda_array_interface__ (what numba, cupy and torch arrays expose)."""

    def __init__(self, shape, typestr="<u2", address=0x7F0000000000, strides=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (address, False),
                                         "strides": strides, "version": 3}


def test_plan_converts_numpy_order_to_driver_order():
    spec = ps.plan_tiled(FakeDeviceArray((300, 200)), box=(64, 64), swizzle="128B", dtype="bf16")
    assert spec.dims == (200, 300)                # innermost first
    assert spec.strides == (400,)                 # bytes, for dims[1:]
    assert spec.box == (64, 64) and spec.box_numpy == (64, 64)
    assert spec.dtype == "bf16" and spec.box_bytes == 64 * 64 * 2
    spec3 = ps.plan_tiled(FakeDeviceArray((6, 40, 72)), box=(3, 16, 32), swizzle="64B")
    assert spec3.dims == (72, 40, 6) and spec3.strides == (144, 40 * 144) and spec3.box == (32, 16, 3)
    assert spec3.dtype == "u16"
    assert ps.plan_tiled(FakeDeviceArray((64, 64), "<f4"), box=(8, 32), swizzle="128B").dtype == "f32"
    assert ps.plan_tiled(FakeDeviceArray((64, 64), "<f2"), box=(8, 64), swizzle="128B").dtype == "f16"


def test_plan_honours_explicit_dims_and_strides():
    # a 1-D buffer viewed as 10 rows of 48 elements with a 128-byte pitch
    spec = ps.plan_tiled(FakeDeviceArray((640,)), box=(4, 48), swizzle="none", dims=(10, 48), strides=(128, 2))
    assert spec.dims == (48, 10) and spec.strides == (128,)


TENSORMAP_ERRORS = [
    (dict(array=object(), box=(8, 8)), "array", r"no __cuda_array_interface__"),
    (dict(array=FakeDeviceArray((2,) * 6), box=(1,) * 6), "array", r"rank must be 1\.\.5, got 6"),
    (dict(array=FakeDeviceArray((64, 64), address=0x7F0000000008), box=(8, 8), swizzle="none"), "array",
     r"not 16-byte aligned"),
    (dict(array=FakeDeviceArray((64, 100)), box=(8, 8), swizzle="none"), "strides",
     r"multiple of 16 bytes .* a row of 100 x 2-byte elements is 200 bytes"),
    (dict(array=FakeDeviceArray((64, 64), strides=(128, 4)), box=(8, 8), swizzle="none"), "strides",
     r"innermost dimension must be contiguous"),
    (dict(array=FakeDeviceArray((512, 64)), box=(300, 8), swizzle="none"), "box", r"1\.\.256, got \(300, 8\)"),
    (dict(array=FakeDeviceArray((64, 64)), box=(8, 12), swizzle="none"), "box", r"multiple of 16 bytes, got 12 x 2 = 24"),
    (dict(array=FakeDeviceArray((64, 256)), box=(8, 128), swizzle="128B"), "box", r"<= 128 bytes, got 128 x 2 = 256"),
    (dict(array=FakeDeviceArray((64, 64)), box=(8, 16), swizzle="32B", element_strides=(1, 9)), "element_strides",
     r"1\.\.8"),
    (dict(array=FakeDeviceArray((64, 64)), box=(8, 8), swizzle="none", dtype="f32"), "dtype",
     r"f32 has 4-byte elements but the array's are 2 bytes"),
    (dict(array=FakeDeviceArray((64, 64)), box=(8, 8), swizzle="none", dtype="complex"), "dtype", r"unsupported"),
    (dict(array=FakeDeviceArray((64, 64)), box=(8, 8), swizzle="16B"), "swizzle", r"must be one of"),
    (dict(array=FakeDeviceArray((64, 64)), box=(8, 8), swizzle="none", interleave="16B"), "interleave", r"rank >= 3"),
    (dict(array=FakeDeviceArray((4, 64, 64)), box=(1, 8, 16), swizzle="none", interleave="32B"), "swizzle",
     r"requires swizzle='32B'"),
    (dict(array=FakeDeviceArray((64, 64), "<i4"), box=(8, 8), swizzle="none", oob_fill="nan"), "oob_fill",
     r"floating-point"),
    (dict(array=FakeDeviceArray((64, 64)), box=(8,), swizzle="none"), "box", r"one entry per dimension \(2\)"),
]


@pytest.mark.parametrize("kwargs,argument,message", TENSORMAP_ERRORS, ids=[m for _, _, m in TENSORMAP_ERRORS])
def test_encode_tiled_names_the_broken_rule(kwargs, argument, message):
    with pytest.raises(ps.TensorMapError, match=message) as info:
        ps.encode_tiled(**kwargs)               # validation happens before the driver is touched
    assert info.value.argument == argument
    assert str(info.value).startswith(f"encode_tiled: {argument}:")


def test_dynamic_shared_memory_limit_is_validated_before_the_driver():
    with pytest.raises(ValueError, match=r"nbytes must be in \[0, 232448\]"):
        ps.set_dynamic_shared_memory(object(), None, 300 * 1024)
