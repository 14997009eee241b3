"""Where a result was measured: GPU, driver, CUDA, library versions, commit, date, host.

``capture()`` never raises and never needs a GPU: whatever it cannot find is recorded as the reason
("not installed", "no GPU: ...") so a result file always says what was and was not there.

The commit is ``NBSPMM_COMMIT`` when set, else read with ``git rev-parse`` / ``git status --porcelain``
(read-only) from the repository holding this package; for a copied working tree, set
``NBSPMM_COMMIT`` (e.g. ``NBSPMM_COMMIT=$(git rev-parse HEAD)``, plus ``NBSPMM_DIRTY=1`` when it has
uncommitted changes) and it is used instead.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
# Distribution names whose versions a result records (the first installed name of each entry counts).
LIBRARIES = {
    "numpy": ("numpy",), "scipy": ("scipy",), "numba": ("numba",), "numba-cuda": ("numba-cuda",),
    "llvmlite": ("llvmlite",), "cuda-bindings": ("cuda-bindings",), "ml_dtypes": ("ml_dtypes",),
    "torch": ("torch",), "triton": ("triton", "pytorch-triton"),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"), "nvidia-cusparse": ("nvidia-cusparse", "nvidia-cusparse-cu13",
                                                                           "nvidia-cusparse-cu12"),
    "nbspmm": ("nbspmm",),
}
GIT_TIMEOUT_S = 10
NVIDIA_SMI_TIMEOUT_S = 20


def library_versions() -> dict[str, str]:
    versions = {}
    for label, distributions in LIBRARIES.items():
        versions[label] = "not installed"
        for name in distributions:
            try:
                versions[label] = importlib.metadata.version(name)
                if name != label:
                    versions[label] += f" ({name})"
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def commit() -> dict[str, Any]:
    """{"hash", "dirty", "source"}: from NBSPMM_COMMIT when set (a declaration wins: a copied working
    tree can carry a stale .git — on the lent H200 on 2026-12-03 git reported an older HEAD), else from
    git, else unknown."""
    if os.environ.get("NBSPMM_COMMIT"):
        return {"hash": os.environ["NBSPMM_COMMIT"], "dirty": os.environ.get("NBSPMM_DIRTY") == "1",
                "source": "NBSPMM_COMMIT"}
    head = _git("rev-parse", "HEAD")
    if head:
        status = _git("status", "--porcelain", "--untracked-files=no")
        return {"hash": head, "dirty": bool(status) if status is not None else None, "source": "git"}
    return {"hash": "unknown", "dirty": None, "source": "no .git and no NBSPMM_COMMIT"}


def gpu() -> dict[str, Any]:
    """GPU name, driver, CUDA runtime as seen by nvidia-smi, torch and numba; reasons where missing."""
    info: dict[str, Any] = {}
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,pci.bus_id",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True)
        first = done.stdout.strip().splitlines()[0]
        name, driver, memory, clock, bus = (part.strip() for part in first.split(","))
        info.update(name=name, driver=driver, memory=memory, max_sm_clock=clock, pci_bus_id=bus)
    except (OSError, subprocess.SubprocessError, IndexError, ValueError) as exc:
        info["nvidia_smi"] = f"unavailable ({type(exc).__name__})"
    try:
        import torch

        info["torch_cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            info.setdefault("name", props.name)
            info["compute_capability"] = f"{props.major}.{props.minor}"
            info["sm_count"] = props.multi_processor_count
            info["l2_bytes"] = getattr(props, "L2_cache_size", None)
        else:
            info["torch"] = "no CUDA device"
    except Exception as exc:
        info["torch"] = f"unavailable ({type(exc).__name__}: {exc})"
    try:
        from numba import cuda

        if cuda.is_available():
            info["cuda_driver_api"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
            info["numba_cuda_runtime"] = ".".join(map(str, cuda.runtime.get_version()))
    except Exception as exc:
        info["numba"] = f"unavailable ({type(exc).__name__})"
    from nbspmm.device import hopper_status

    ok, why = hopper_status()
    info["hopper"] = ok
    if not ok:
        info["no_gpu_reason"] = why
    return info


def capture() -> dict[str, Any]:
    """Everything above plus the date (UTC), host, Python and the command line."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "argv": list(sys.argv),
        "commit": commit(),
        "gpu": gpu(),
        "libraries": library_versions(),
    }
