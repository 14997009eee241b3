"""One protocol for everything the harness times: the peers (``peers.py``) and nbspmm's own kernels.

A ``Candidate`` says whether it can run here at all (``available``) and on a given case
(``supports``); ``prepare`` moves its copy of A to the device and builds whatever it needs (not timed)
and returns a ``Prepared``, whose ``run(i)`` launches one product on rotated input set ``i`` and returns
the output (any device array), and whose ``to_host`` copies an output (or some of its columns) back as
float64 for the correctness check. The harness never looks inside: fakes in the tests implement the
same five methods with NumPy.

Statuses a row can end with (``STATUSES``):
    ok             checked against the float64 reference, then timed
    wrong          ran, but the error exceeded the bound (or was NaN): reported, never timed
    missing        the peer's library is not importable on this machine (the reason says which)
    unsupported    the peer exists but cannot run this case (dtype, shape, memory), with the reason
    not built yet  an nbspmm kernel whose host API or variant does not exist yet
    error          an exception while preparing or running (its message is the reason)
"""
from __future__ import annotations

import importlib
import re
from typing import Any, Protocol, Sequence

import numpy as np

OK, WRONG, MISSING, UNSUPPORTED, NOT_BUILT, ERROR = (
    "ok", "wrong", "missing", "unsupported", "not built yet", "error")
STATUSES = (OK, WRONG, MISSING, UNSUPPORTED, NOT_BUILT, ERROR)

PEER, NBSPMM = "peer", "nbspmm"


class Unsupported(Exception):
    """Raised by ``prepare`` when the candidate cannot run this case; the message is the reason."""


class NotBuiltYet(Exception):
    """Raised by an nbspmm candidate whose kernel or host API does not exist yet."""


class Inputs(Protocol):
    """The rotated input sets of one case, shared by every candidate (see ``gpu.TorchInputs``)."""

    b: Sequence[Any]          # device B matrices (K × N, row-major, case dtype), all equal in value

    def converted(self, dtype: str) -> Sequence[Any]:
        """The same B sets converted to ``dtype`` (made once per case, shared by candidates)."""

    def b_host(self, columns: np.ndarray | None) -> np.ndarray:
        """B (its ``columns`` only, when given) as float64 on the host."""


class Prepared(Protocol):
    in_dtype: str    # the dtype the candidate multiplies in (picks the error bound and the bytes)
    out_dtype: str   # the dtype of its output
    note: str        # what exactly runs (e.g. the library routine), shown in the result file

    def poison(self) -> None:
        """Fill every output buffer the candidate owns with NaN (no-op when it allocates per call)."""

    def run(self, input_index: int) -> Any:
        """Launch one product on input set ``input_index``; return the output device array."""

    def to_host(self, out: Any, columns: np.ndarray | None) -> np.ndarray:
        """``out`` (its ``columns`` only, when given) as a float64 NumPy array, M × (N or len(columns))."""

    def release(self) -> None:
        """Drop the device data."""


class Candidate(Protocol):
    name: str
    kind: str         # PEER or NBSPMM
    storage: str      # "dense", "csr", "bsr", "bcsr" or "wcsr": which byte formula applies (metrics.py)

    def available(self) -> tuple[bool, str]:
        """(True, version or "") when it can run on this machine, else (False, why not)."""

    def supports(self, case) -> tuple[bool, str]:
        """(True, "") when it can run ``case``, else (False, why not)."""

    def prepare(self, case, inputs: Inputs) -> Prepared:
        """Device copy of A and whatever else the product needs; raises Unsupported / NotBuiltYet."""


def missing_status(candidate: Candidate) -> str:
    """The status of a candidate that is not available: peers are missing, our kernels not built yet."""
    return NOT_BUILT if candidate.kind == NBSPMM else MISSING


# ---------------------------------------------------------------- nbspmm kernels
# ``--kernels`` names: FORMAT or FORMAT:VARIANT. Each format maps to the keyword arguments of
# ``nbspmm.SpMMOperator``; a variant becomes ``kernel=VARIANT`` (e.g. bcsr:v0 ... bcsr:v4, the ablation
# ladder; bcsr:baseline); without one the API's default kernel of the format runs. ``baseline`` alone is
# the plain CUDA-core kernel over WCSR (the irregular format).
NBSPMM_FORMATS = {
    "bcsr": {"format": "bcsr"},
    "wcsr": {"format": "wcsr"},
    "baseline": {"format": "wcsr", "kernel": "baseline"},
    "csr": {"format": "csr"},
    "csr-async": {"format": "csr", "kernel": "segments", "loads": "cp_async"},   # the segment kernel's cp.async ring
    "csr-async-ca": {"format": "csr", "kernel": "segments", "loads": "cp_async", "cache_operator": "ca"},  # + L1
    "wcsr16": {"format": "wcsr", "window_rows": 16},      # 16-row windows: for wcsr16:swapped
    "auto": {"format": "auto"},                           # what SpMMOperator(A) picks: BCSR, WCSR or CSR
    "auto-reorder": {"format": "auto", "reorder": "auto"},  # ... with reorder="auto" (RCM where it pays)
    "bcsr-linear": {"format": "bcsr"},                    # op.linear(X): Y = X Aᵀ, X = Bᵀ and Y = Cᵀ as they lie
    "bcsr-linear-dynamic": {"format": "bcsr", "item_order": "dynamic"},  # ... items claimed at run time
    "csr-rcm": {"format": "csr", "reorder": "rcm"},       # rows walked in RCM order (formats.reorder)
    "wcsr-rcm": {"format": "wcsr", "reorder": "rcm"},     # windows built over the RCM order, rows mapped back
    "routed": {"format": "routed"},                       # dense windows on WCSR, the other rows on a CSR kernel
}
# Names whose product is the nn.Linear orientation (``SpMMOperator.linear``), timed on X = Bᵀ and Y = Cᵀ.
LINEAR_FORMATS = ("bcsr-linear", "bcsr-linear-dynamic")
# Byte formula per format (metrics.py): BCSR moves its padded 64 × 64 tiles; WCSR and the baseline are
# held to the irregular floor, CSR's (their own padding is extra traffic the floor does not excuse).
NBSPMM_STORAGE = {"bcsr": "bcsr", "bcsr-linear": "bcsr", "bcsr-linear-dynamic": "bcsr",
                  "wcsr": "wcsr", "baseline": "wcsr", "csr": "wcsr", "csr-async": "wcsr", "csr-async-ca": "wcsr",
                  "wcsr16": "wcsr",
                  "auto": "wcsr", "auto-reorder": "wcsr", "csr-rcm": "wcsr", "wcsr-rcm": "wcsr", "routed": "wcsr"}
VARIANT_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]+$")
NBSPMM_OUT_DTYPE = "float32"
# Output suffix of a kernel name: "bcsr:pingpong@in" writes C in the input dtype (what cuBLAS writes,
# and what an LLM layer hands the next one); no suffix or "@f32" writes fp32.
OUT_SUFFIXES = {"": NBSPMM_OUT_DTYPE, "f32": NBSPMM_OUT_DTYPE, "in": None}


def split_out_suffix(name: str) -> tuple[str, str | None]:
    """'bcsr:v4@in' -> ('bcsr:v4', None) (output in the input dtype); 'bcsr' -> ('bcsr', 'float32')."""
    base, _, suffix = name.partition("@")
    if suffix not in OUT_SUFFIXES:
        raise ValueError(f"kernel {name!r}: the output suffix after '@' must be 'f32' or 'in' (the input dtype)")
    return base, OUT_SUFFIXES[suffix]


def parse_kernel_name(name: str) -> tuple[str, str | None]:
    """'bcsr:v3' -> ('bcsr', 'v3') (an '@f32' / '@in' output suffix is allowed and ignored here);
    raises ValueError naming the known formats."""
    fmt, separator, variant = split_out_suffix(name)[0].partition(":")
    if fmt not in NBSPMM_FORMATS:
        raise ValueError(f"unknown kernel {name!r}: the format must be one of {sorted(NBSPMM_FORMATS)}, "
                         f"optionally with :VARIANT (e.g. bcsr:v2)")
    if separator and not VARIANT_PATTERN.match(variant):
        raise ValueError(f"kernel {name!r}: the variant after ':' must be letters, digits, '_', '.' or '-'")
    return fmt, (variant or None)


class NbspmmCandidate:
    """An nbspmm kernel through the host API: ``op = nbspmm.SpMMOperator(A, format=..., kernel=...,
    dtype=..., out_dtype=...)`` once, then ``op(B, out=C)`` per product, with B a torch tensor of the
    case dtype and C a preallocated torch tensor (one per rotated input set) of float32, or of the case
    dtype for a name ending in '@in'."""

    kind = NBSPMM

    def __init__(self, name: str):
        self.name = name
        self.format, self.variant = parse_kernel_name(name)
        self.out_dtype = split_out_suffix(name)[1]        # None: the case's input dtype
        self.storage = NBSPMM_STORAGE[self.format]

    def _api(self):
        try:
            api = importlib.import_module("nbspmm.api")
        except ModuleNotFoundError as exc:
            if exc.name == "nbspmm.api":
                raise NotBuiltYet("nbspmm.api does not exist yet") from None
            raise
        if not hasattr(api, "SpMMOperator"):
            raise NotBuiltYet("nbspmm.api has no SpMMOperator yet")
        return api

    def _operator_kwargs(self, api) -> dict:
        """SpMMOperator keywords; NotBuiltYet when the API's kernel table lacks the format or variant."""
        kwargs = dict(NBSPMM_FORMATS[self.format])
        if self.variant is not None:
            kwargs["kernel"] = self.variant
        table = getattr(api, "KERNELS", None)  # format -> {kernel name: ...}, when the API publishes it
        if kwargs["format"] == "auto":
            if self.variant is not None:
                raise ValueError(f"kernel {self.name!r}: 'auto' picks the format and its default kernel; no variant")
            return kwargs                      # the API's own choice, default kernels only
        if isinstance(table, dict):
            if kwargs["format"] not in table:
                raise NotBuiltYet(f"nbspmm.api has no format {kwargs['format']!r} yet "
                                  f"(formats: {', '.join(table)})")
            kernel = kwargs.get("kernel")
            if kernel is not None and kernel not in table[kwargs["format"]]:
                raise NotBuiltYet(f"nbspmm.api has no kernel {kernel!r} for {kwargs['format']!r} yet "
                                  f"(kernels: {', '.join(table[kwargs['format']])})")
        kwargs.setdefault("kernel", None)
        # A kernel still marked experimental may be benchmarked: the harness checks every result against
        # the float64 reference before timing it, and a wrong one is reported, not timed. Without a
        # variant the format's default kernel (the first of its table) is the one that runs.
        kernel = kwargs["kernel"]
        if kernel is None and isinstance(table, dict):
            kernel = next(iter(table[kwargs["format"]]), None)
        if (kwargs["format"], kernel) in getattr(api, "UNVERIFIED", {}):
            kwargs["experimental"] = True
        if self.format in LINEAR_FORMATS and getattr(api, "LINEAR_UNVERIFIED", None):
            kwargs["experimental"] = True
        if kwargs["format"] == "wcsr" and kwargs.get("reorder") and getattr(api, "MAPPED_ROWS_UNVERIFIED", None):
            kwargs["experimental"] = True
        return kwargs

    def available(self) -> tuple[bool, str]:
        try:
            self._operator_kwargs(self._api())
        except NotBuiltYet as exc:
            return False, str(exc)
        except Exception as exc:  # an import error inside the API: say what it is
            return False, f"nbspmm.api cannot be imported ({type(exc).__name__}: {exc})"
        return True, ""

    def supports(self, case) -> tuple[bool, str]:
        return True, ""

    def prepare(self, case, inputs: Inputs) -> "_NbspmmPrepared":
        from nbspmm.bench.suites import numpy_dtype

        api = self._api()
        kwargs = self._operator_kwargs(api)
        out_dtype = self.out_dtype or case.dtype
        if kwargs["format"] in ("auto", "routed"):
            kwargs["n_cols"] = case.n          # the cost model's N (nbspmm.choose): the pick, or the routing threshold
        try:
            op = api.SpMMOperator(case.csr(), dtype=numpy_dtype(case.dtype),
                                  out_dtype=numpy_dtype(out_dtype), **kwargs)
        except NotImplementedError as exc:
            raise NotBuiltYet(f"SpMMOperator({kwargs}): {exc or 'not implemented'}") from None
        prepared = _LinearPrepared if self.format in LINEAR_FORMATS else _NbspmmPrepared
        note = repr(op)
        if getattr(op, "row_order", None) is not None:     # what the ordering bought, and its host time
            note += f"; reorder {op.row_order.describe()}"
        if kwargs["format"] == "routed":                     # how the windows were split
            stats = op.sparse.stats()
            note += (f"; {stats.tensor_windows} windows ({stats.tensor_nnz} nonzeros) on tensor cores, "
                     f"{stats.core_rows} rows ({stats.core_nnz}) on CUDA cores")
        return prepared(op, case, inputs, note, out_dtype)


class _NbspmmPrepared:
    def __init__(self, op, case, inputs: Inputs, note: str, out_dtype: str = NBSPMM_OUT_DTYPE):
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        self.op = op
        self.b = inputs.b
        self.out = [torch.empty((case.m, case.n), dtype=gpu.torch_dtype(out_dtype), device="cuda")
                    for _ in inputs.b]
        self.in_dtype = case.dtype
        self.out_dtype = out_dtype
        self.note = note
        self.bound = None

    def poison(self) -> None:
        for out in self.out:
            out.fill_(float("nan"))

    def run(self, input_index: int):
        """One product through the bound (packed) launch of this input set — what a prepared operator's
        user calls in a loop (``op.bind(B, C)``; ``op(B, out=C)`` adds reading the two arrays' shapes
        and a cache lookup)."""
        if self.bound is None:
            self.bound = [self.op.bind(b, out) for b, out in zip(self.b, self.out)]
        self.bound[input_index]()
        return self.out[input_index]

    def to_host(self, out, columns):
        from nbspmm.bench import gpu

        return gpu.device_to_host(out, columns)

    def release(self) -> None:
        self.op = self.b = self.out = self.bound = None


class _LinearPrepared(_NbspmmPrepared):
    """The nn.Linear orientation: each input set's B is copied once to X = Bᵀ (N x K, row-major; outside
    the timing, as a model holds its activations), and each product is ``op.linear(X, out=Y)`` into a
    preallocated Y (N x M); the check reads Yᵀ."""

    def __init__(self, op, case, inputs: Inputs, note: str, out_dtype: str = NBSPMM_OUT_DTYPE):
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        super().__init__(op, case, inputs, note + " .linear", out_dtype)
        self.x = [b.t().contiguous() for b in inputs.b]
        self.out = [torch.empty((case.n, case.m), dtype=gpu.torch_dtype(out_dtype), device="cuda")
                    for _ in inputs.b]

    def run(self, input_index: int):
        self.op.linear(self.x[input_index], out=self.out[input_index])
        return self.out[input_index]

    def to_host(self, out, columns):
        from nbspmm.bench import gpu

        return gpu.device_to_host(out.t(), columns)

    def release(self) -> None:
        super().release()
        self.x = None
