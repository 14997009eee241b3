"""Device memory: check before allocating, and a CUDA out-of-memory as a clear Python error.

    memory.check_device_fits(nbytes, "the BCSR operand", fmt="bcsr")   # DeviceMemoryError if not free
    with memory.out_of_memory_as_error("the BCSR operand", nbytes, fmt="bcsr"):
        ... cuda.to_device(...) ...                                      # CUDA OOM -> DeviceMemoryError

``DeviceMemoryError`` is a ``formats.FormatTooLargeError`` (a MemoryError), the error the host builders
raise for a format too large for host memory: one ``except MemoryError`` catches both. The free memory
comes from the driver (``cuMemGetInfo`` through numba's context), so other processes' allocations count.
"""
from __future__ import annotations

import contextlib

from formats.estimate import FormatTooLargeError, human_bytes

# CUDA driver API status CUDA_ERROR_OUT_OF_MEMORY (cuda.h), the code numba's CudaAPIError carries.
CUDA_ERROR_OUT_OF_MEMORY = 2


class DeviceMemoryError(FormatTooLargeError):
    """A device allocation that does not fit in the GPU's free memory."""


def device_memory_info() -> tuple[int, int]:
    """(free, total) bytes of the current GPU."""
    from numba import cuda

    free, total = cuda.current_context().get_memory_info()
    return int(free), int(total)


def remedy(fmt: str | None) -> str:
    """The format advice of a message: the tile formats store padding zeros that CSR does not."""
    return "; use format='auto' or 'csr' (CSR stores no padding)" if fmt in ("bcsr", "wcsr") else ""


def check_device_fits(nbytes: int, what: str, fmt: str | None = None, memory_info=None) -> None:
    """DeviceMemoryError when ``nbytes`` exceed the GPU's free memory (``memory_info()`` -> (free, total);
    default ``device_memory_info``)."""
    free, total = (memory_info or device_memory_info)()
    if nbytes > free:
        raise DeviceMemoryError(f"{what} needs {human_bytes(nbytes)} of GPU memory; {human_bytes(free)} of "
                                f"{human_bytes(total)} are free{remedy(fmt)}")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the driver's out-of-memory (numba's CudaAPIError carries the status as ``code``)."""
    code = getattr(exc, "code", None)
    return code == CUDA_ERROR_OUT_OF_MEMORY or "CUDA_ERROR_OUT_OF_MEMORY" in str(exc)


@contextlib.contextmanager
def out_of_memory_as_error(what: str, nbytes: int, fmt: str | None = None):
    """Re-raise a CUDA out-of-memory inside the block as DeviceMemoryError naming ``what`` and its size."""
    try:
        yield
    except DeviceMemoryError:
        raise
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        raise DeviceMemoryError(f"the GPU ran out of memory allocating {what} ({human_bytes(nbytes)})"
                                f"{remedy(fmt)}") from exc
