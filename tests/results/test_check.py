"""`stagebench check`: OK on a fresh run, FAIL with a diff when an expected value is edited."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO, child_path, stagebench_cli
from tests.test_cache import write_config

pytestmark = pytest.mark.slow  # the real command line in subprocesses

ENV = {"PYTHONPATH": child_path(), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}


def cli(*args, cwd):
    return stagebench_cli(*args, cwd=cwd, env=ENV)  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, small_synthetic):
    tmp = tmp_path_factory.mktemp("check")
    r = cli("run", write_config(tmp, small_synthetic), cwd=tmp)
    assert r.returncode == 0, r.stderr
    return tmp / "out-c"


def test_update_then_check_passes_exactly(run_dir, tmp_path):
    exp = tmp_path / "expected.yaml"
    assert cli("check", run_dir, exp, "--update", "--tolerance", "0.002", cwd=tmp_path).returncode == 0
    doc = yaml.safe_load(exp.read_text())
    assert doc["tolerance"] == 0.002 and set(doc["stages"]) == {"bm25", "bm25_stem", "rrf", "tb"}
    assert len(doc["dataset"]["fingerprint"]) == 64
    r = cli("check", run_dir, exp, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recomputed from runs/ and qrels.trec" in r.stdout
    assert r.stdout.strip().splitlines()[-1] == "OK: 15 values: 15 OK, 0 OK-within-tolerance, 0 FAIL"


def test_update_keeps_the_replaced_files_tolerances(run_dir, tmp_path):
    exp = tmp_path / "expected.yaml"
    cli("check", run_dir, exp, "--update", "--tolerance", "0.002", cwd=tmp_path)
    doc = yaml.safe_load(exp.read_text())
    doc["tolerances"] = {"RR@10": 0.005}
    exp.write_text(yaml.safe_dump(doc))
    assert cli("check", run_dir, exp, "--update", cwd=tmp_path).returncode == 0
    again = yaml.safe_load(exp.read_text())
    assert again["tolerance"] == 0.002 and again["tolerances"] == {"RR@10": 0.005}
    cli("check", run_dir, exp, "--update", "--tolerance", "0.01", cwd=tmp_path)
    assert yaml.safe_load(exp.read_text())["tolerance"] == 0.01


def test_edited_values_give_within_tolerance_and_fail_with_a_diff(run_dir, tmp_path):
    exp = tmp_path / "expected.yaml"
    cli("check", run_dir, exp, "--update", "--tolerance", "0.002", cwd=tmp_path)
    doc = yaml.safe_load(exp.read_text())
    true_tb = doc["stages"]["tb"]["nDCG@10"]
    doc["stages"]["tb"]["nDCG@10"] = round(true_tb + 0.05, 6)  # way off
    doc["stages"]["bm25"]["RR@10"] = round(doc["stages"]["bm25"]["RR@10"] - 0.001, 6)  # inside the tolerance
    doc["stages"]["rrf"]["P@10"] = 0.5  # a metric the run folder does not have
    exp.write_text(yaml.safe_dump(doc))
    r = cli("check", run_dir, exp, cwd=tmp_path)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    fail = next(line for line in lines if line.startswith("tb") and "nDCG@10" in line).split()
    assert fail[-1] == "FAIL" and fail[2] == f"{true_tb + 0.05:.6f}" and fail[3] == f"{true_tb:.6f}" and fail[4] == "-0.050000"
    assert next(line for line in lines if line.startswith("bm25 ") and "RR@10" in line).split()[-1] == "OK-within-tolerance"
    assert "missing" in next(line for line in lines if "P@10" in line)
    assert lines[-1] == "FAIL: 16 values: 13 OK, 1 OK-within-tolerance, 2 FAIL"


def test_other_data_fails_on_the_fingerprint_first(run_dir, tmp_path):
    exp = tmp_path / "expected.yaml"
    cli("check", run_dir, exp, "--update", cwd=tmp_path)
    doc = yaml.safe_load(exp.read_text())
    doc["dataset"]["qrels_fingerprint"] = "0" * 64
    exp.write_text(yaml.safe_dump(doc))
    r = cli("check", run_dir, exp, cwd=tmp_path)
    assert r.returncode == 1
    assert any(line.startswith("(dataset)") and "qrels_fingerprint" in line and line.endswith("FAIL")
               for line in r.stdout.splitlines())  # fmt: skip


@pytest.mark.parametrize("content,msg", [
    ("stages: {}", "stages: no expected values"),
    ("stages: {bm25: {nDCG@10: high}}", "stages.bm25.nDCG@10: expected a number"),
    ("tolerence: 0.1\nstages: {bm25: {nDCG@10: 0.5}}", "tolerence: unknown key"),
    ("stages: [", "invalid YAML"),
])  # fmt: skip
def test_bad_expected_file_is_a_one_line_error(run_dir, tmp_path, content, msg):
    exp = tmp_path / "bad.yaml"
    exp.write_text(content)
    r = cli("check", run_dir, exp, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"stagebench: error: {exp}: ") and msg in r.stderr and len(r.stderr.splitlines()) == 1
