"""Shared fixtures. Real data lives outside the repo at ../shared/data (never copied in)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def child_path(*more: object) -> str:
    """The PYTHONPATH of every command a test starts: this tree's own ``src`` first (so the child
    imports the code under test, never a stagebench the venv installed: in a worktree or the planted
    sandbox the tree is another copy), the tree itself (for ``tests.*``), then ``more``."""
    return os.pathsep.join([str(REPO / "src"), str(REPO), *map(str, more)])


SHARED = REPO.parent / "shared" / "data"


#: what the suite's environment says about compute threads (each xdist worker's share, pytest_configure),
#: passed to every command a test starts even when the test gives the whole environment: without it, a
#: fine-tuning command took every core beside the other worker (test_train: 179 s in CI, then 68-121 s)
THREAD_VARS = ("STAGEBENCH_THREADS", "OMP_NUM_THREADS")


def stagebench_cli(*args, cwd=None, env=None, **kw) -> subprocess.CompletedProcess:
    """``python -m stagebench ARGS`` in a subprocess, text output captured: the one way tests
    run the real command line. ``env``, when given, is the whole environment (with the suite's
    :data:`THREAD_VARS`)."""
    if env is not None:
        env = {**{v: os.environ[v] for v in THREAD_VARS if v in os.environ}, **env}
    return subprocess.run([sys.executable, "-m", "stagebench", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, **kw)  # fmt: skip


def esci_config(tmp_path: Path, dataset: Path, stages: str, name: str = "t", evaluation: str = "") -> Path:
    """A config file ``<tmp_path>/<name>.yaml`` over an ESCI-layout folder (test split), results in
    ``<tmp_path>/<name>`` and the cache in ``<tmp_path>/cache``; ``stages`` is the YAML list body."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"name: {name}\noutput: {tmp_path / name}\ncache_dir: {tmp_path / 'cache'}\n"
                   f"dataset: {{loader: esci, path: {dataset}, split: test}}\nstages:\n{stages}\n"
                   + (f"evaluation: {evaluation}\n" if evaluation else ""))  # fmt: skip
    return cfg


def shared_path(name: str) -> Path:
    p = SHARED / name
    if not p.exists():
        pytest.skip(f"real test data {p} is absent (it lives in ../shared/data next to the repo, as in CI)")
    return p


def pytest_configure(config):
    """Under pytest-xdist each worker gets its share of the cores for the models it runs (and the
    processes it starts): two workers each spinning a thread per core on 2 cores took 1.5x the wall
    time and 1.6x the CPU time of one thread each (tests/models/test_batch_invariance.py and four other
    model modules, 169 s against 111 s). A value the caller set is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        share = str(max(1, (os.cpu_count() or 1) // workers))
        os.environ.setdefault("STAGEBENCH_THREADS", share)
        os.environ.setdefault("OMP_NUM_THREADS", share)
    # Ray starts its workers at nice 15: beside the other pytest worker and the reproductions (`make
    # test`), a Ray test's workers got almost no CPU and one test took 781 s instead of 88 s
    os.environ.setdefault("RAY_worker_niceness", "0")


UNGROUPED = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` a worker sends a group's tests together by a ``@group`` suffix on
    their node ids; a pytest that pytest-xdist cannot rename (pytest 9.2 with xdist 3.8) drops the
    groups silently, and two Ray clusters then race on one machine. Such a session fails each grouped
    test with the reason instead of running it."""
    if getattr(config.option, "loadgroup", False) and any(i.get_closest_marker("xdist_group") and "@" not in i.nodeid for i in items):
        config.stash[UNGROUPED] = (f"pytest-xdist's --dist loadgroup has no effect with pytest {pytest.__version__}: "
                                   "install the test extra's pytest (pip install -e '.[test]')")  # fmt: skip


def pytest_runtest_setup(item):
    if item.get_closest_marker("xdist_group") and UNGROUPED in item.config.stash:
        pytest.fail(item.config.stash[UNGROUPED], pytrace=False)


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """The stage cache of this test session, for tests that run stages a reproduction also runs (never
    the user's ``.stagebench-cache``): ``$STAGEBENCH_TEST_CACHE`` under ``make test``, which gives the
    same fresh folder to the reproduction check after the tests, else a temporary folder."""
    given = os.environ.get("STAGEBENCH_TEST_CACHE")
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        return Path(given)
    return tmp_path_factory.mktemp("session-cache")


@pytest.fixture(scope="session")
def esci_real() -> Path:
    return shared_path("esci-real-rows")


@pytest.fixture(scope="session")
def cranfield() -> Path:
    return shared_path("cranfield")


@pytest.fixture(scope="session")
def small_synthetic(tmp_path_factory) -> Path:
    """A small synthetic ESCI-style dataset in the official layout (fast to index)."""
    from stagebench.data.synthetic import SyntheticSpec, generate

    out = tmp_path_factory.mktemp("synthetic-small")
    generate(out, SyntheticSpec(seed=7, n_products=1500, n_test_queries=40, n_train_queries=20))
    return out


@pytest.fixture(scope="session")
def tiny_synthetic(tmp_path_factory) -> Path:
    """The smallest synthetic dataset the model tests need (600 products, 24 test queries, no train
    split): a model stage over it encodes or scores in seconds."""
    from stagebench.data.synthetic import SyntheticSpec, generate

    out = tmp_path_factory.mktemp("synthetic-tiny")
    generate(out, SyntheticSpec(seed=11, n_products=600, n_test_queries=24, n_train_queries=0))
    return out


#: the judging round's folder (:func:`judged_folder`): three cheap stages
JUDGED_STAGES = [
    {"name": "bm25", "type": "bm25", "params": {"top_k": 50}},
    {"name": "bm25_flat", "type": "bm25", "params": {"k1": 0.3, "b": 0.1, "top_k": 50}},
    {"name": "rrf", "type": "rrf", "inputs": ["bm25", "bm25_flat"]},
]


@pytest.fixture(scope="module")
def judged_folder(tmp_path_factory, tiny_synthetic) -> Path:
    """Three cheap stages on the tiny generated dataset, every hole in their top 10 graded by the rules (the
    judging round's tests; here, at the root, so any grouping of the files on pytest's workers finds it)."""
    from stagebench import api

    root = tmp_path_factory.mktemp("judging-round")
    cfg = {"name": "round", "output": str(root / "round"), "cache_dir": str(root / "cache"),
           "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"}, "stages": JUDGED_STAGES,
           "evaluation": {"metrics": ["nDCG@10", "P@10"], "permutations": 200, "latency_queries": 0},
           "judge": {"backend": "rules", "depth": 10, "sample": 60}}  # fmt: skip
    return api.run(cfg).output


#: the evaluation of :func:`sweep_folder`: a gain table that ranks S above E (so grade order is not
#: gain order), and a seed, permutations and resamples other than the defaults (so a default used
#: where the config's value belongs shows)
SWEEP_EVALUATION = {"gain": {0: 0, 1: 1, 2: 3, 3: 2}, "seed": 7, "permutations": 500, "bootstrap": 300,
                    "latency_queries": 0, "alpha": 0.04, "segments": ["length"]}  # fmt: skip
SWEEP_DEPTHS = [5, 10, 20, 40]


def _sweep_run(root: Path, dataset: Path, keep: bool) -> Path:
    import stagebench

    shuffle = "tests.shuffle_plugin:HashShuffle"
    stagebench.run({
        "name": "sweep", "output": str(root / "out"), "cache_dir": str(root / "cache"),
        "dataset": {"loader": "esci", "path": str(dataset), "split": "test"},
        "stages": [
            {"name": "bm25", "type": "bm25", "params": {"top_k": 60}},
            {"name": "shuffle", "type": "plugin", "target": shuffle, "inputs": ["bm25"],
             "params": {"top_n": 10, "depths": SWEEP_DEPTHS, "keep": keep}},
            {"name": "shuffle5", "type": "plugin", "target": shuffle, "inputs": ["bm25"],
             "params": {"top_n": 5, "keep": keep}},
            {"name": "shuffle40", "type": "plugin", "target": shuffle, "inputs": ["bm25"],
             "params": {"top_n": 40, "keep": keep}},
            {"name": "boost", "type": "plugin", "target": "examples.title_boost:TitleBoostReranker",
             "inputs": ["shuffle40"], "params": {"top_n": 20}},
        ],
        "evaluation": SWEEP_EVALUATION,
    })  # fmt: skip
    return root / "out"


@pytest.fixture(scope="session")
def sweep_folder(tmp_path_factory, small_synthetic) -> Path:
    """One in-process run (no model: BM25 and model-free plug-ins, a few seconds) with a depth sweep,
    stages that repeat the sweep's depths as separate ``top_n`` runs, a chain of rerankers, and
    :data:`SWEEP_EVALUATION`: the results folder the definition tests read."""
    return _sweep_run(tmp_path_factory.mktemp("sweep"), small_synthetic, False)


@pytest.fixture(scope="session")
def sweep_folder_b(tmp_path_factory, small_synthetic) -> Path:
    """:func:`sweep_folder` with shuffles that keep the input order: the same stages, other runs (``stagebench compare``)."""
    return _sweep_run(tmp_path_factory.mktemp("sweep-b"), small_synthetic, True)


@pytest.fixture(scope="session")
def embedded_dataset(tmp_path_factory) -> Path:
    """The embedded synthetic dataset `make bench` uses (data/synthetic-esci); generated with
    the same (deterministic) spec into a temp folder when the repo has not generated it yet."""
    from stagebench.data.synthetic import SyntheticSpec, generate

    local = REPO / "data" / "synthetic-esci"
    if (local / "shopping_queries_dataset_examples.parquet").is_file():
        return local
    out = tmp_path_factory.mktemp("synthetic-esci")
    generate(out, SyntheticSpec())
    return out


SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def model_entries(tmp_path_factory) -> Path:
    """A cache holding the bundled SmolLM2's de-quantized fp32 checkpoint (kind ``models``), built once
    per session, by whichever pytest-xdist worker asks first (the others wait on a lock and read it):
    building it takes ~20 s of both cores, and every run with a fresh cache would build it again.
    :func:`seed_models` links it into a test's cache (tests of the build itself use a cache of their own)."""
    from stagebench.models.resolve import on_this_machine, resolve_model
    from stagebench.models.variants import gguf_checkpoint

    return _session_models(tmp_path_factory, "model-entries",
                           lambda cache: gguf_checkpoint(on_this_machine(resolve_model(SMOLLM2)), cache, "tests"))


def _session_models(tmp_path_factory, name: str, build) -> Path:
    """The cache folder ``name`` of this test session, filled by ``build(cache)`` under a lock: the first
    pytest-xdist worker builds, the others wait and read the entries back (``build`` reads what exists)."""
    import fcntl

    from stagebench.cache import Cache

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # this session's folder, above each worker's own
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = Cache(root / name)
        build(cache)
    return cache.root


@pytest.fixture(scope="session")
def model_variants(tmp_path_factory) -> Path:
    """A cache holding the variants the default chain's model stages run on a CPU - all-MiniLM-L6-v2's
    fp32 ONNX export and the cross-encoder's per-token INT8 - built once per session as
    :func:`model_entries` is, for the tests whose subject is not building them: :func:`seed_models`
    links them into a run's cache (a subprocess run would spend seconds of both cores on each)."""
    from stagebench.models.resolve import resolve_model
    from stagebench.models.variants import for_placement, onnx_kind
    from stagebench.runtime.devices import place

    def build(cache) -> None:
        for name, role in (("sentence-transformers/all-MiniLM-L6-v2", "bi_encoder"),
                           ("cross-encoder/ms-marco-MiniLM-L-12-v2", "cross_encoder")):  # fmt: skip
            model = resolve_model(name)
            kind = onnx_kind(model)
            for_placement(model, place("cpu", "auto", kind, "tests", role), kind, cache, "tests", role)

    return _session_models(tmp_path_factory, "model-variants", build)


def seed_models(entries: Path, cache_dir: Path) -> Path:
    """Hard-link every model entry of ``entries`` into the cache ``cache_dir`` (made if absent): the
    run finds them as it finds any cached entry, checksums verified on read; ``cache_dir`` is returned."""
    for entry in (entries / "models").iterdir():
        if not entry.name.startswith("."):
            shutil.copytree(entry, cache_dir / "models" / entry.name, copy_function=os.link, dirs_exist_ok=True)
    return cache_dir


def smollm2_folder(entries: Path, folder: Path) -> Path:
    """SmolLM2 as a plain transformers folder (the de-quantized checkpoint of :func:`model_entries`,
    its files linked, not its cache record), as a server or a ``model: <folder>`` config loads it."""
    [entry] = [e for e in (entries / "models").iterdir() if not e.name.startswith(".")]
    folder.mkdir(parents=True)
    for f in entry.iterdir():
        if f.name != "entry.json":
            os.link(f, folder / f.name)
    return folder
