"""stagebench.runtime.cluster.supervisor: a run on Ray is watched from a parent process, because Ray's native core
can end the driver without running any Python. Here the child is a real ``stagebench run`` (a slow
plug-in stage, no cluster needed), ended by SIGKILL the way Ray ends it, or terminated through the parent."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from stagebench.cache import Cache
from stagebench.runtime.engine import EngineParams
from stagebench.errors import StagebenchError
from stagebench.runtime.cluster.supervisor import RAY_LOG_ENV, run_watched
from tests.conftest import REPO, child_path, esci_config

pytestmark = pytest.mark.slow  # a real child process

STAGES = """\
  - {name: bm25, type: bm25, params: {top_k: 50}}
  - {name: slow, type: plugin, target: "tests.shuffle_plugin:Sleepy", inputs: [bm25], params: {top_n: 10, pause: 0.5}}
"""


def child_of(tmp_path: Path, name: str, deadline: float = 120) -> int:
    """The pid of the run writing ``<tmp_path>/<name>``: its staging folder is named after it."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for d in tmp_path.glob(f".{name}.partial-*"):
            pid = d.name.rsplit("-", 1)[1]
            if pid.isdigit() and int(pid) != 1 and (d / "runs").is_dir():
                return int(pid)
        time.sleep(0.05)
    raise AssertionError("the child never began writing its results")


def in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


@pytest.fixture
def cwd_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # the plug-in's module is found from the repository root
    monkeypatch.setenv("PYTHONPATH", child_path())


def test_a_child_ended_by_a_signal_is_one_error_naming_it_and_leaves_nothing_partial(tmp_path, small_synthetic, cwd_repo):
    cfg = esci_config(tmp_path, small_synthetic, STAGES, name="t")
    (tmp_path / ".t.partial-1" / "mine").mkdir(parents=True)  # not stagebench's (no mark): left alone
    cache = Cache(tmp_path / "cache")
    leftovers: list[Path] = []
    ray_log: list[Path] = []

    def end_it() -> None:
        pid = child_of(tmp_path, "t")
        half = tmp_path / "cache" / "runs" / f".tmp-0123abcd-{pid}-42"  # a half-written entry of the child's
        half.mkdir(parents=True)
        leftovers.append(half)
        env = dict(x.split("=", 1) for x in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in x)
        ray_log.append(Path(env[RAY_LOG_ENV]))  # what Ray's core wrote there before the kill: named, kept
        with ray_log[0].open("a") as f:
            f.write("core_worker.cc: a line of Ray's\n")
        os.kill(pid, signal.SIGKILL)  # from outside (Ray's core ends a driver with an exit status, test_ray_cluster)

    t = in_thread(end_it)
    with pytest.raises(StagebenchError) as got:
        run_watched(["run", str(cfg)], cfg, EngineParams(type="ray"), tmp_path / "t", cache.remove_leftovers)
    t.join()
    assert str(got.value).startswith(f"{cfg}: the run's process (pid ")
    assert "was ended by signal SIGKILL, sent by something outside stagebench" in str(got.value)
    assert "Ray cluster" not in str(got.value)  # the cluster is not blamed for a signal
    assert str(got.value).endswith(f" (Ray's own messages: {ray_log[0]})") and ray_log[0].is_file()
    ray_log[0].unlink()
    assert "no results folder was written or changed" in str(got.value)
    assert not (tmp_path / "t").exists()
    assert [p.name for p in tmp_path.glob(".t.partial-*")] == [".t.partial-1"] and (tmp_path / ".t.partial-1" / "mine").is_dir()
    assert leftovers and not leftovers[0].exists()


def test_a_child_that_finishes_or_is_terminated_gives_its_own_exit(tmp_path, small_synthetic, cwd_repo):
    fast = esci_config(tmp_path, small_synthetic, STAGES.replace("pause: 0.5", "pause: 0.0"), name="fast")
    assert run_watched(["run", str(fast)], fast, EngineParams(type="ray"), tmp_path / "fast", Cache(tmp_path / "c").remove_leftovers) == 0
    assert (tmp_path / "fast" / "stage_table.txt").is_file()

    cfg = esci_config(tmp_path, small_synthetic, STAGES, name="t")

    def terminate() -> None:
        child_of(tmp_path, "t")
        os.kill(os.getpid(), signal.SIGTERM)  # `kill PARENT` (SIGINT is ignored in a background job, as in CI)

    t = in_thread(terminate)
    code = run_watched(["run", str(cfg)], cfg, EngineParams(type="ray"), tmp_path / "t", Cache(tmp_path / "cache").remove_leftovers)
    t.join()
    # the child stops as a local run does on SIGTERM: exit 128 + 15, nothing written or left
    assert code == 128 + signal.SIGTERM and not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.partial-*"))


def test_the_status_a_child_reported_is_the_exit_whatever_its_teardown_does_after(tmp_path, small_synthetic, cwd_repo,
                                                                                 capfd):  # fmt: skip
    """Ray's teardown can end a driver after it has printed its error line (a Ray Data thread still fetching
    when ``ray.shutdown`` runs): the parent exits with the status the child reported, not the teardown's."""
    stages = STAGES.splitlines()[0] + '\n  - {name: boom, type: plugin, target: "tests.shuffle_plugin:FailsAndTearsDown", ' \
                                     'inputs: [bm25], params: {top_n: 5}}\n'  # fmt: skip
    cfg = esci_config(tmp_path, small_synthetic, stages, name="t")
    assert run_watched(["run", str(cfg)], cfg, EngineParams(type="ray"), tmp_path / "t", Cache(tmp_path / "c").remove_leftovers) == 2
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("stagebench: error:")]
    assert len(said) == 1 and "stage boom: plug-in tests.shuffle_plugin:FailsAndTearsDown raised in score()" in said[0], said
    assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.partial-*"))


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc, as ``ps --ppid`` does)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_watched_child_starts_is_one_line_and_the_signals_exit(tmp_path, small_synthetic, sig):
    """`stagebench run --engine ray` and the signal 0.3 s after its watched child appears (the child still
    importing the command line: it stops before it can report): one line, the exit a local run gives (130,
    143), never "the Ray cluster ... went away". No cluster is needed: the child stops before it connects."""
    import subprocess
    import sys

    cfg = esci_config(tmp_path, small_synthetic, STAGES, name="t")
    env = {**os.environ, "PYTHONPATH": child_path()}
    proc = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg), "--engine", "ray"], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    end = time.monotonic() + 120
    while not children_of(proc.pid):
        assert proc.poll() is None and time.monotonic() < end, proc.stderr.read() if proc.poll() is not None else "no child"
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == (130 if sig == signal.SIGINT else 128 + sig), err
    assert len(lines) == 1 and lines[0].startswith("stagebench:"), err
    assert ("interrupted" if sig == signal.SIGINT else "SIGTERM") in lines[0] and "went away" not in err
    assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.partial-*"))
