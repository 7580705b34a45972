"""engine: ray against a real Ray cluster started the way docs/scale.md says (``ray start --head``
with token authentication, Ray's default where a token exists), not one the run starts itself:
the documented steps give the local table; a driver without the token, or with a wrong one, is
told so in one line within seconds (the address's source named); the cluster stopped mid-stage
(``ray stop``) is one line, a non-zero exit and nothing partial left. No mock: real ``ray``
processes, the bundled MiniLM bi-encoder."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, seed_models, stagebench_cli
from tests.runtime.test_ray_engine import table

pytest.importorskip("ray", reason="engine: ray needs the ray extra (make test installs it)")
# one Ray cluster at a time on this machine: every Ray test runs on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

RAY_CLI = Path(sys.executable).with_name("ray")
#: the environment every process here starts from: no Ray settings of the machine's own, workers at the
#: tests' own priority (tests/conftest.py)
BASE = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_worker_niceness": "0"}
STAGES = """\
  - {name: bm25, type: bm25, params: {top_k: 100}}
  - {name: dense, type: dense, params: {top_k: 100, batch_size: 8}}
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny(tiny_synthetic) -> Path:
    return tiny_synthetic


def config(tmp: Path, data: Path, name: str, engine: str = "", variants: Path | None = None) -> Path:
    """The run's config; ``variants`` (the ``model_variants`` fixture): its model files seeded into the cache."""
    if variants is not None:
        seed_models(variants, tmp / (name + "-cache"))
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(f"name: {name}\noutput: {tmp / name}\ncache_dir: {tmp / (name + '-cache')}\n{engine}"
                   f"dataset: {{loader: esci, path: {data}, split: test}}\nstages:\n{STAGES}"
                   "evaluation: {metrics: [nDCG@10, R@100], latency_queries: 0}\n")  # fmt: skip
    return cfg


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("stagebench: error:")]


class Cluster:
    """A head node started by ``ray start --head`` with token authentication (docs/scale.md, steps 1-2)."""

    def __init__(self, tmp: Path, auth: bool = True) -> None:
        tmp.mkdir(parents=True)
        self.stopped = False
        self.token = tmp / "auth_token"
        self.token.write_text(secrets.token_hex(32))  # what `ray get-auth-token --generate` writes
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # step 1: the head, token authentication on (the documented RAY_AUTH_MODE=token), or off
        self.env = BASE | ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token)} if auth else
                           {"RAY_AUTH_MODE": "disabled"})  # fmt: skip
        # started from a directory of its own, not the runs' (a relative path a worker used would land there)
        subprocess.run([str(RAY_CLI), "start", "--head", f"--port={self.port}", "--num-cpus=2",
                        "--include-dashboard=false", "--disable-usage-stats"], env=self.env, check=True, cwd=tmp,
                       capture_output=True, text=True, timeout=120)  # fmt: skip

    def stop(self) -> None:
        self.stopped = True
        subprocess.run([str(RAY_CLI), "stop", "--force"], env=self.env, capture_output=True, timeout=120)


class Clusters:
    """The module's head node, started on first use and again after a test stopped it: the
    documented steps and the stop mid-stage share one ``ray start`` when they run in that order."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.current, self.started = tmp, None, 0

    def running(self, auth: bool = True) -> Cluster:
        if self.current is not None and not self.current.stopped and (self.current.env["RAY_AUTH_MODE"] == "token") != auth:
            self.current.stop()
        if self.current is None or self.current.stopped:
            self.started += 1
            self.current = Cluster(self.tmp / f"head-{self.started}", auth)
        return self.current


@pytest.fixture(scope="module")
def clusters(tmp_path_factory) -> Iterator[Clusters]:
    cs = Clusters(tmp_path_factory.mktemp("ray-cluster"))
    try:
        yield cs
    finally:
        if cs.current is not None and not cs.current.stopped:
            cs.current.stop()


@pytest.fixture
def cluster(clusters) -> Cluster:
    return clusters.running()


def test_the_documented_steps_give_the_local_table_and_a_driver_without_the_token_is_told(tmp_path, tiny, cluster,
                                                                                          model_variants):  # fmt: skip
    # step 2 (docs/scale.md): the driver gets RAY_AUTH_MODE=token and the token, the address in RAY_ADDRESS
    driver = cluster.env | {"RAY_ADDRESS": cluster.address}
    r = stagebench_cli("run", config(tmp_path, tiny, "on-cluster", "engine: ray\n", model_variants), cwd=REPO, env=driver)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"engine ray on {cluster.address} (from $RAY_ADDRESS)" in r.stderr
    local = stagebench_cli("run", config(tmp_path, tiny, "local", variants=model_variants), cwd=REPO, env=BASE)
    assert local.returncode == 0, local.stderr[-3000:]
    assert table(tmp_path / "on-cluster") == table(tmp_path / "local")

    # no RAY_AUTH_MODE: Ray sends no token to an address it was given; named, before any stage
    t0 = time.monotonic()
    r = stagebench_cli("run", config(tmp_path, tiny, "no-token", "engine: ray\n"), cwd=REPO,
                       env=BASE | {"RAY_ADDRESS": cluster.address})  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == error_lines(r.stderr), r.stderr[-3000:]
    line = error_lines(r.stderr)[0]
    assert f"$RAY_ADDRESS: the Ray cluster at {cluster.address} requires token authentication" in line
    assert "set RAY_AUTH_MODE=token" in line
    assert took < 15, f"the refusal took {took:.1f} s (ray.init alone retries for about 20 s)"
    assert not (tmp_path / "no-token").exists()

    # a wrong token, the address in the config: the source named is the config's key
    cfg = config(tmp_path, tiny, "wrong-token", f"engine: {{type: ray, address: '{cluster.address}'}}\n")
    r = stagebench_cli("run", cfg, cwd=REPO, env=BASE | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64})
    assert r.returncode == 2, r.stderr[-3000:]
    assert error_lines(r.stderr) == [
        f"stagebench: error: {cfg}: engine.address: the Ray cluster at {cluster.address} rejected this process's "
        "authentication token (from $RAY_AUTH_TOKEN); use the head's token (`ray get-auth-token` there; "
        "docs/scale.md)"]  # fmt: skip
    assert r.stderr.strip().splitlines() == error_lines(r.stderr)


def test_a_killed_command_takes_its_driver_with_it_and_a_workers_error_keeps_its_words(tmp_path, tiny, cluster):
    """kill -9 of ``stagebench run`` (the parent) mid-stage: its driver (the watched child, in a session of its
    own) stops too - no results folder appears afterwards - and the same command resumes from the cache. Then a
    stagebench error raised inside a Ray task reaches the user as its own one line."""
    slow = '  - {name: bm25, type: bm25, params: {top_k: 50}}\n  - {name: slow, type: plugin, target: ' \
           '"tests.shuffle_plugin:Sleepy", inputs: [bm25], params: {top_n: 10, pause: 0.5}}\n'  # no model: cheap on Ray
    cfg = tmp_path / "killed.yaml"
    cfg.write_text(config(tmp_path, tiny, "killed", "engine: {type: ray, num_workers: 2, batch_size: 1}\n").read_text()
                   .replace(STAGES, slow))  # fmt: skip
    env = cluster.env | {"RAY_ADDRESS": cluster.address}
    log = tmp_path / "killed.err"
    with log.open("w") as err:
        parent = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg)], cwd=REPO, stderr=err,
                                  stdout=subprocess.DEVNULL, env=env)  # fmt: skip
        deadline = time.monotonic() + 300
        while "stage slow: " not in log.read_text() or "Ray worker(s)" not in log.read_text():
            assert parent.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(2)  # the workers are scoring
        driver = int(next(tmp_path.glob(".killed.partial-*")).name.rsplit("-", 1)[1])
        parent.kill()
        parent.wait(timeout=30)
        t0 = time.monotonic()
        while Path(f"/proc/{driver}").exists() and (Path(f"/proc/{driver}/stat").read_text().split()[2] != "Z"):
            assert time.monotonic() - t0 < 60, "the driver kept running after its parent was killed"
            time.sleep(0.1)
    stopped_in = time.monotonic() - t0
    time.sleep(3)  # long enough for a driver still running to have written its results
    assert not (tmp_path / "killed").exists() and not list(tmp_path.glob(".killed.partial-*")), stopped_in
    said = log.read_text()  # the driver stopped as on SIGTERM: its own line, not Ray's exit and stack dump
    assert "stagebench: error: terminated (SIGTERM): no results folder" in said and "SIGTERM received" not in said, said[-3000:]
    r = stagebench_cli("run", cfg, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stage bm25: cached run" in r.stderr  # resumed: the finished stage came from the cache

    bad = tmp_path / "fails.yaml"
    bad.write_text(config(tmp_path, tiny, "fails", "engine: {type: ray, num_workers: 1}\n").read_text().replace(
        STAGES, STAGES.splitlines()[0] + '\n  - {name: boom, type: plugin, target: "tests.shuffle_plugin:Fails", '
                                         'inputs: [bm25], params: {top_n: 5}}\n'))  # fmt: skip
    r = stagebench_cli("run", bad, cwd=REPO, env=env)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "stage boom: plug-in tests.shuffle_plugin:Fails raised in score() on" in lines[0], r.stderr[-3000:]
    assert "RuntimeError: the plug-in's own words about" in lines[0] and "DataContext" not in lines[0]


def test_address_null_starts_a_cluster_of_its_own_where_ray_start_runs_one(tmp_path, tiny, cluster):
    """``address: null`` is documented as a local cluster for the run; ``ray.init()`` without an address would
    join the cluster ``ray start`` runs on this machine instead (and refuse the local cluster's size)."""
    stages = '  - {name: bm25, type: bm25, params: {top_k: 50}}\n  - {name: hashed, type: plugin, target: ' \
             '"tests.shuffle_plugin:HashShuffle", inputs: [bm25], params: {top_n: 10}}\n'  # no model: cheap on Ray
    own = tmp_path / "own.yaml"
    own.write_text(config(tmp_path, tiny, "own", "engine: {type: ray, local_cpus: 1}\n").read_text().replace(STAGES, stages))
    r = stagebench_cli("run", own, cwd=REPO, env=BASE)  # no RAY_ADDRESS; the cluster of `ray start` is running
    assert r.returncode == 0, r.stderr[-3000:]
    assert "engine ray: connected to a new local cluster" in r.stderr and ": 1 CPU" in r.stderr, r.stderr[-3000:]
    # Ray Data's own progress lines are the stage's to say: its advice to turn on the bars stagebench turned
    # off, and its "Dataset ... execution finished" (the stage logs "done on Ray")
    assert "hashed: rerank top 10: done on Ray" in r.stderr
    assert "Progress bars disabled" not in r.stderr and "execution finished" not in r.stderr, r.stderr[-3000:]


def test_the_cluster_stopped_mid_stage_is_one_line_a_non_zero_exit_and_nothing_partial(tmp_path, tiny, cluster,
                                                                                        model_variants):  # fmt: skip
    cfg = config(tmp_path, tiny, "stopped", "engine: {type: ray, num_workers: 2, batch_size: 1}\n", model_variants)
    (tmp_path / ".stopped.partial-1" / "keep").mkdir(parents=True)  # not ours (no mark): left alone
    log = tmp_path / "run.err"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg)], cwd=REPO, stderr=err,
                                stdout=subprocess.DEVNULL, env=cluster.env | {"RAY_ADDRESS": cluster.address})  # fmt: skip
        deadline = time.monotonic() + 300
        while "dense: corpus:" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        assert list(tmp_path.glob(".stopped.partial-*")) != [], "the run had not begun writing"
        cluster.stop()  # `ray stop`, mid-stage
        t0 = time.monotonic()
        code = proc.wait(timeout=300)
    took = time.monotonic() - t0
    text = log.read_text()
    assert code == 2, text[-3000:]
    lines = error_lines(text)
    assert len(lines) == 1, text[-3000:]
    # engine.lost_after_s (10 s, not Ray's 60), and Ray's own lines in the log the line names, not on the screen
    assert took < 45, f"{took:.0f} s from `ray stop` to the exit"
    ray_log = Path(lines[0].rsplit("(Ray's own messages: ", 1)[1].rstrip(")"))
    try:
        assert ray_log.name.startswith("stagebench-ray-") and "core_worker" in ray_log.read_text()
    finally:
        ray_log.unlink(missing_ok=True)
    assert not [line for line in text.splitlines() if "core_worker" in line or "ERROR" in line or "Traceback" in line]
    # the same line whether Ray's core ended the driver first or the driver saw the loss (supervisor.LOST)
    assert lines[0].startswith(f"stagebench: error: {cfg}: engine: the Ray cluster at {cluster.address} (from "
                               "$RAY_ADDRESS), or this node's Ray processes, went away during a stage"), lines
    assert "the same command resumes" in lines[0]
    assert not (tmp_path / "stopped").exists()
    assert sorted(p.name for p in tmp_path.glob(".stopped.partial-*")) == [".stopped.partial-1"]
    assert (tmp_path / ".stopped.partial-1" / "keep").is_dir()
    assert list((tmp_path / "stopped-cache").rglob(".tmp-*")) == []


def test_a_driver_sending_a_token_to_a_cluster_without_authentication_is_told_before_any_stage(tmp_path, tiny, clusters):
    """The other direction of the mismatch: the cluster lets the driver in, but its actors die before they
    start (the cause only in the raylet's log); one actor before any stage names it (issue 71)."""
    cluster = clusters.running(auth=False)
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(32))
    cfg = config(tmp_path, tiny, "mismatch", "engine: ray\n")
    r = stagebench_cli("run", cfg, cwd=REPO, env=BASE | {"RAY_ADDRESS": cluster.address, "RAY_AUTH_MODE": "token",
                                                        "RAY_AUTH_TOKEN_PATH": str(token)})  # fmt: skip
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == error_lines(r.stderr), r.stderr[-3000:]  # nothing of Ray's, no stage
    assert error_lines(r.stderr) == [
        f"stagebench: error: $RAY_ADDRESS: this process sends a token (RAY_AUTH_MODE=token), but the Ray cluster at "
        f"{cluster.address} does not use token authentication, so its workers cannot answer this process (every actor "
        "dies before it starts); unset RAY_AUTH_MODE here, or start the cluster with RAY_AUTH_MODE=token "
        "(docs/scale.md)"]  # fmt: skip
    assert not (tmp_path / "mismatch").exists()


def test_address_auto_with_a_token_the_cluster_refuses_is_told_in_seconds(tmp_path, tiny, cluster):
    """``address: auto`` and no RAY_AUTH_MODE: ray.init finds the cluster ``ray start`` runs here and sends
    ~/.ray/auth_token; a token the cluster does not know is named before any stage, in seconds (it took
    ray.init's 20 s of retries and 20 Ray warnings: issue 71)."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    t0 = time.monotonic()
    r = stagebench_cli("run", config(tmp_path, tiny, "auto", "engine: {type: ray, address: auto}\n"), cwd=REPO,
                       env=BASE | {"HOME": str(home)})  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == error_lines(r.stderr), r.stderr[-3000:]
    line = error_lines(r.stderr)[0]
    assert "engine.address (auto: the cluster `ray start` runs on this machine): the Ray cluster at " in line
    assert "rejected this process's authentication token (from ~/.ray/auth_token)" in line
    assert took < 15, f"{took:.1f} s"
    assert not (tmp_path / "auto").exists()
