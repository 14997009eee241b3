"""`scripts/gpu_suite.py --tests` verdicts on the CPU, with the module runs faked: a module killed at its
time limit after pytest finished (its JUnit file complete, every test passed) passes; killed before,
or with a failed test, it fails."""
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>"""


def _load():
    spec = importlib.util.spec_from_file_location("gpu_suite", REPO / "scripts" / "gpu_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_verdicts(tmp_path, monkeypatch):
    suite = _load()
    outcomes = {  # module -> (return code, JUnit test cases or None for no file)
        "test_api_gpu": (suite.TIMEOUT_RC, '<testcase name="a"/><testcase name="b"/>'),
        "test_bcsr_gpu": (suite.TIMEOUT_RC, None),
        "test_wcsr_gpu": (1, '<testcase name="a"/><testcase name="b"><failure message="x"/></testcase>'),
    }

    def fake_run_logged(cmd, log_path, env=None, timeout=None):
        xml = Path(next(a for a in cmd if str(a).startswith("--junitxml=")).split("=", 1)[1])
        module = xml.stem
        Path(log_path).write_text("log\n")
        rc, cases = outcomes.get(module, (5, None))          # 5: pytest selected no test in the module
        if cases is not None:
            xml.write_text(JUNIT.format(cases=cases))
        return rc, 300.0

    monkeypatch.setattr(suite, "run_logged", fake_run_logged)
    rows = {name: (verdict, detail) for name, verdict, detail in suite.gpu_tests(tmp_path, None)}
    assert set(rows) == set(outcomes)
    assert rows["test_api_gpu"][0] == "PASS" and "overran the limit at exit" in rows["test_api_gpu"][1]
    assert rows["test_bcsr_gpu"][0] == f"FAIL rc={suite.TIMEOUT_RC}"
    assert rows["test_wcsr_gpu"][0] == "FAIL rc=1" and "1 failed" in rows["test_wcsr_gpu"][1]


def test_no_module_starts_past_the_deadline_and_slow_ones_start_first(tmp_path, monkeypatch):
    """Past the deadline a module is NOT RUN (the summary must get out before the device's limit); the
    others get at most the time left, and the slow modules are started first."""
    suite = _load()
    started, budgets = [], []

    def fake_run_logged(cmd, log_path, env=None, timeout=None):
        xml = Path(next(a for a in cmd if str(a).startswith("--junitxml=")).split("=", 1)[1])
        started.append(xml.stem)
        budgets.append(timeout)
        Path(log_path).write_text("log\n")
        xml.write_text(JUNIT.format(cases='<testcase name="a"/>'))
        return 0, 1.0

    monkeypatch.setattr(suite, "run_logged", fake_run_logged)
    rows = suite.gpu_tests(tmp_path, None, deadline=suite.time.time() - 1)
    assert rows and all(verdict == "NOT RUN" for _, verdict, _ in rows) and not started
    rows = suite.gpu_tests(tmp_path, None, timeout=400, deadline=suite.time.time() + 100)
    assert all(verdict == "PASS" for _, verdict, _ in rows)
    assert started[:2] == list(suite.SLOW_MODULES_FIRST[:2])
    assert all(suite.MIN_MODULE_START_S <= budget <= 100 for budget in budgets)
