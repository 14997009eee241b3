"""Host side of the CUDA-core baseline: device copy of the format and the launch."""
from __future__ import annotations

from dataclasses import dataclass

import formats
from nbspmm.kernels import baseline
from nbspmm.kernels.dtypes import host_view


@dataclass
class PreparedBaseline:
    name: str
    kernel: object
    arrays: tuple          # device arrays: (row pointer, column map, values)
    n_row_units: int
    unit_rows: int

    def launch(self, B, C, stream=None):
        """Enqueue C = A @ B on `stream` (a CUstream; None: the legacy default stream) (B, C: anything
        with ``__cuda_array_interface__``; numba wraps them per call — the readable baseline keeps
        numba's ordinary launch)."""
        from numba import cuda

        grid, block = baseline.grid_for(self.n_row_units, self.unit_rows, C.shape[1])
        numba_stream = 0 if stream is None or int(stream) == 0 else cuda.external_stream(int(stream))
        self.kernel[grid, block, numba_stream](*self.arrays, B, C)

    def bind(self, B, C):
        return lambda stream=None: self.launch(B, C, stream)


def prepare(fmt, in_kind: str, out_kind: str, *, variant: str = "baseline") -> PreparedBaseline:
    from numba import cuda

    if isinstance(fmt, formats.BCSR):
        BM, BK = fmt.block_shape
        kernel = baseline.bcsr_kernel(BM, BK, in_kind, out_kind)
        arrays = (fmt.indptr, fmt.indices, host_view(fmt.data))
        return PreparedBaseline("baseline", kernel, tuple(cuda.to_device(a) for a in arrays),
                                fmt.n_block_rows, BM)
    if fmt.row_order is not None:       # its windows write C in the stored row order
        raise ValueError("the baseline WCSR kernel takes no row order: use the tensor-core WCSR kernels "
                         "(kernel='ws'), or build the WCSR without row_order")
    kernel = baseline.wcsr_kernel(fmt.window_rows, fmt.tile_cols, in_kind, out_kind)
    arrays = (fmt.window_ptr, fmt.tile_col_index, host_view(fmt.tiles))
    return PreparedBaseline("baseline", kernel, tuple(cuda.to_device(a) for a in arrays),
                            fmt.n_windows, fmt.window_rows)
