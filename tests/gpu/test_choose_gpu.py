"""format="auto" on the H200: the cost model's pick runs and is correct at every N hint (marker gpu)."""
from pathlib import Path

import numpy as np
import pytest

from nbspmm import choose
from nbspmm.bench.suites import load_matrix
from tests.gpu.spmm_checks import check_product

pytestmark = pytest.mark.gpu
DATA = Path(__file__).parents[2] / "nbspmm" / "data"


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*") if p.suffix in (".mtx", ".npz")))
@pytest.mark.parametrize("n_cols", (64, 256))
def test_auto_runs_the_chosen_kernel(name, n_cols):
    from nbspmm.api import SpMMOperator

    A = load_matrix(DATA / name).matrix
    op = SpMMOperator(A, n_cols=n_cols)
    expected = choose.choose_format(A, n_cols=n_cols)
    assert op.choice == expected and op.format_name == expected.format
    assert op.kernel == SpMMOperator(op.sparse, kernel=expected.kernel).kernel
    if expected.format == "wcsr":
        assert op.sparse.window_rows == expected.build_options["window_rows"]
    B = np.random.default_rng(n_cols).standard_normal((A.shape[1], n_cols)).astype(np.float16)
    check_product(op, op.sparse, B, np.float32, f"{name} auto N={n_cols} ({expected.candidate})")


def test_a_built_format_has_no_choice():
    import formats
    from nbspmm.api import SpMMOperator

    A = load_matrix(DATA / "dwt_992.mtx").matrix
    assert SpMMOperator(formats.CSR.from_scipy(A)).choice is None
