"""scripts/gpu_suite.py --sanitize covers every registered kernel of every format, every BCSR
variant's nn.Linear orientation, and the row-order kernels on a reordered format."""
import sys
from pathlib import Path

REPO = Path(__file__).parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import gpu_suite  # noqa: E402

from nbspmm.api import KERNELS  # noqa: E402
from nbspmm.kernels.bcsr import LINEAR_VARIANTS, STACKED_VARIANTS  # noqa: E402


def test_every_registered_kernel_is_sanitized():
    cases = gpu_suite.sanitize_cases()
    plain = {name for name in cases if "+" not in name and "@" not in name}
    assert plain == ({f"{fmt}-{kernel}" for fmt, kernels in KERNELS.items() for kernel in kernels}
                     | set(gpu_suite.SANITIZE_OPTION_KERNELS))
    for name in cases:                       # each name is one scripts/sanitize_case.py understands
        kernel, _, combine = name.partition("+")
        kernel, _, orientation = kernel.partition("@")
        fmt, _, variant = kernel.partition("-")
        known = variant in KERNELS[fmt] or kernel in gpu_suite.SANITIZE_OPTION_KERNELS
        assert known and combine in ("", "two_pass", "planned", "dynamic") and orientation in ("", "linear", "rows", "stacked",
                                                                         "stacked-linear", "f16"), name
    linear = {name for name in cases if name.endswith("@linear")}
    assert linear == {f"bcsr-{variant}@linear" for variant in LINEAR_VARIANTS}
    stacked = {name for name in cases if "@stacked" in name}
    assert stacked == {f"bcsr-{variant}@stacked" for variant in STACKED_VARIANTS} | {
        "bcsr-v4-tma@stacked-linear", "bcsr-v4-tma@stacked+two_pass", "bcsr-v4-tma@stacked-linear+two_pass"}
    reordered = {name for name in cases if name.endswith("@rows")}
    assert reordered == {"wcsr-ws@rows", "wcsr-pingpong@rows", "wcsr-v2@rows", "csr-rows@rows", "csr-segments@rows"}
    assert {name for name in cases if name.endswith("@f16")} == {"csr-segments@f16", "csr-segments-packed@f16",
                                                                 "csr-segments-async@f16"}
    for order in ("planned", "dynamic"):
        assert {name for name in cases if name.endswith(f"+{order}")} == {
            f"bcsr-v4+{order}", f"bcsr-v4-tma@linear+{order}", f"bcsr-pingpong+{order}", f"wcsr-ws+{order}"}
    assert gpu_suite.sanitize_cases("wcsr-ws*") == ["wcsr-ws", "wcsr-ws-tma", "wcsr-ws-cpasync", "wcsr-ws-rows",
                                                    "wcsr-ws+two_pass", "wcsr-ws@rows", "wcsr-ws+planned",
                                                    "wcsr-ws+dynamic"]


def test_sanitize_starts_nothing_after_the_deadline(tmp_path, monkeypatch):
    """With the sanitizer runs faked: one run passes, one finds an error, and with the deadline too near
    every run is listed NOT RUN (none started) and the JSON counts them apart."""
    import json
    import time

    texts = {"memcheck": "case ok\n========= ERROR SUMMARY: 0 errors\n",
             "racecheck": "case ok\n========= RACECHECK SUMMARY: 2 hazards displayed\n",
             "synccheck": "case ok\n========= ERROR SUMMARY: 0 errors\n"}
    started = []

    def fake_run_logged(cmd, log_path, env=None, timeout=None):
        tool = cmd[cmd.index("--tool") + 1]
        started.append(tool)
        Path(log_path).write_text(texts[tool])
        return (99 if tool == "racecheck" else 0), 1.0

    monkeypatch.setattr(gpu_suite, "run_logged", fake_run_logged)
    rows = gpu_suite.sanitize(tmp_path, pattern="bcsr-v3")
    assert [verdict for _, verdict, _ in rows] == ["PASS", "FAIL rc=99", "PASS"]
    record = json.loads((tmp_path / "sanitize.json").read_text())
    assert (record["runs"], record["passed"], record["not_run"]) == (3, 2, 0)

    started.clear()
    late = tmp_path / "late"
    late.mkdir()
    rows = gpu_suite.sanitize(late, pattern="bcsr-v3", deadline=time.time() + gpu_suite.MIN_SANITIZE_START_S / 2)
    assert started == [] and {verdict for _, verdict, _ in rows} == {"NOT RUN"}
    record = json.loads((late / "sanitize.json").read_text())
    assert (record["runs"], record["passed"], record["not_run"]) == (0, 0, 3)


def test_several_globs_select_their_union():
    assert gpu_suite.sanitize_cases("csr-*,bcsr-v3") == ["bcsr-v3", "csr-rows", "csr-segments", "csr-rows@rows",
                                                        "csr-segments@rows", "csr-segments-packed",
                                                        "csr-segments-async", "csr-segments-async-ca",
                                                        "csr-segments@f16",
                                                        "csr-segments-packed@f16", "csr-segments-async@f16"]
