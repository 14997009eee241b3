"""scripts/gpu_suite.py --sanitize covers every registered kernel of every format, and every BCSR
variant's nn.Linear orientation."""
import sys
from pathlib import Path

REPO = Path(__file__).parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import gpu_suite  # noqa: E402

from nbspmm.api import KERNELS  # noqa: E402
from nbspmm.kernels.bcsr import LINEAR_VARIANTS  # noqa: E402


def test_every_registered_kernel_is_sanitized():
    cases = gpu_suite.sanitize_cases()
    plain = {name for name in cases if "+" not in name and "@" not in name}
    assert plain == {f"{fmt}-{kernel}" for fmt, kernels in KERNELS.items() for kernel in kernels}
    for name in cases:                       # each name is one scripts/sanitize_case.py understands
        kernel, _, combine = name.partition("+")
        kernel, _, orientation = kernel.partition("@")
        fmt, _, variant = kernel.partition("-")
        assert variant in KERNELS[fmt] and combine in ("", "two_pass") and orientation in ("", "linear"), name
    linear = {name for name in cases if name.endswith("@linear")}
    assert linear == {f"bcsr-{variant}@linear" for variant in LINEAR_VARIANTS}
    assert gpu_suite.sanitize_cases("wcsr-ws*") == ["wcsr-ws", "wcsr-ws-tma", "wcsr-ws-cpasync", "wcsr-ws+two_pass"]
