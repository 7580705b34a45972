"""The floor plan: every module sits in one layer (docs/architecture.md), imports only from its
own layer or lower ones, and the import graph has no cycle - counting every import, at module
level or inside a function."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "stagebench"

LAYERS = {
    0: ["errors", "version", "optional", "files", "textfile", "params", "runtime.system", "runtime.progress", "analyzer", "metrics.compute", "stats",
        "table", "data.text", "data.corpus", "rerank", "llm", "llm.schemes", "runtime.devices", "runtime.engine", "judge", "models", "runtime", "models.onnx_graphs", "models.shapes"],
    1: ["llm.listwise", "llm.labels", "llm.request", "judge.scale", "runs", "metrics.supports", "metrics.families", "metrics.trec_names", "metrics.names", "metrics.value", "metrics.holes", "metrics", "cache", "models.resolve", "record", "data.dataset", "data.esci", "data.jsonl", "data.trec", "data.irds",
        "metrics.delegate",
        "data.synthetic", "data", "rerank.merge", "runtime.cluster", "runtime.cluster.failures", "runtime.cluster.auth",
        "runtime.cluster.session", "runtime.cluster.workers", "runtime.cluster.supervisor"],
    2: ["models.encoders", "models.onnx_weights", "models.variants", "stages.base", "stages.neural", "llm.http", "llm.local", "llm.chat", "rerank.plugins", "rerank.pointwise",
        "llm.windows", "llm.families", "stages.bm25", "stages.dense", "stages.fusion", "stages.rerank", "stages.run_file",
        "stages.llm_rerank", "stages.oracle", "stages.pyterrier", "stages.rerankers_adapter", "stages", "results.interop", "results", "results.ceilings", "results.queries", "results.folder", "results.depth",
        "results.scoring", "results.cost", "results.check", "results.compare", "results.segments", "results.matrix", "results.experiment", "judgments", "judgments.agreement", "judgments.pool",
        "judgments.views", "judgments.incompleteness", "judgments.planning", "judgments.worksheet", "judgments.grades", "judgments.estimate",
        "judgments.capped", "judgments.linear", "judgments.power", "judgments.design", "judgments.coverage", "judgments.sampling", "results.baselines", "judge.rules",
        "judge.ask", "judge.section", "outputs"],
    3: ["config", "report", "report.tables", "report.plots", "report.explorer", "report.html", "report.write"],
    4: ["execute", "forecast", "judge.grading", "api.ground", "api.judging", "pipeline", "fitting", "fitting.finetune", "fitting.train", "fitting.tune", "reproductions"],
    5: ["api", "api.result", "api.folders", "api.cascades", "api.evaluation", "cli.flags", "cli.result", "cli.folders",
        "cli.judging", "cli.evaluation", "cli", "docgen", "", "__main__"],
}  # fmt: skip
LAYER = {f"stagebench.{m}".rstrip("."): n for n, mods in LAYERS.items() for m in mods}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    name = ".".join(("stagebench", *parts))
    return name.removesuffix(".__init__")


def imports() -> dict[str, set[str]]:
    """module -> the stagebench modules it imports (``from pkg import sub`` counts as ``pkg.sub``)."""
    paths = list(SRC.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {}
    for path in paths:
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("stagebench"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    deps.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("stagebench")}
        graph[module_name(path)] = deps - {module_name(path)}
    return graph


def test_every_module_has_a_layer_and_imports_only_downwards():
    graph = imports()
    assert set(graph) == set(LAYER), f"modules without a layer: {set(graph) - set(LAYER)}; gone: {set(LAYER) - set(graph)}"
    for mod, deps in graph.items():
        for dep in deps:
            assert LAYER[dep] <= LAYER[mod], f"{mod} (layer {LAYER[mod]}) imports {dep} (layer {LAYER[dep]})"


def test_no_package_imports_back_from_a_package_that_imports_it():
    """Packages (and each module at the top) as rooms: no two rooms import each other, directly or
    round a loop - a room low in the house never reaches back into one above it."""
    graph = imports()

    def room(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2])  # stagebench.rerank, stagebench.record, ...

    rooms: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        rooms.setdefault(room(mod), set()).update(room(d) for d in deps if room(d) != room(mod))
    try:
        list(TopologicalSorter(rooms).static_order())
    except CycleError as exc:
        loop = exc.args[1]
        arrows = [f"{m} -> {d}" for a, b in zip(loop, loop[1:]) for m, ds in graph.items() if room(m) == a
                  for d in ds if room(d) == b]  # fmt: skip
        raise AssertionError(f"rooms import each other round {' -> '.join(loop)}: " + "; ".join(arrows)) from None


def test_no_import_cycle_and_every_module_imports_in_dependency_order():
    graph = imports()
    order = list(TopologicalSorter(graph).static_order())  # raises CycleError on a cycle
    code = "import importlib\nfor m in %r:\n    importlib.import_module(m)\nprint('ok')" % order
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]


#: what a manifest holds (top level, a stage's record, its stats, the evaluation and dataset records)
MANIFEST_JSON_KEYS = {
    "complete", "stagebench_version", "config_path", "resolved", "evaluation", "started", "finished", "wall_seconds",
    "peak_rss_mb_process", "files", "stages", "reorders_input", "candidate_depth", "computed_seconds", "peak_rss_mb",
    "computed_peak_rss_mb", "run_digest", "depth_runs", "stats", "relevance_threshold", "baseline", "fingerprint",
    "queries_fingerprint", "qrels_fingerprint", "label_names", "corpus_scope", "prompt_tokens", "completion_tokens",
    "windows", "windows_from_cache", "seconds_per_query", "model_seconds", "price_per_1k_tokens", "matrix", "rerankers",
    "pools", "cells",
}  # fmt: skip
#: modules that read a config (or another JSON object) whose keys share these names, not a manifest
NOT_MANIFEST_READERS = {
    "stagebench.config", "stagebench.params", "stagebench.cache", "stagebench.runtime.engine",
    "stagebench.files", "stagebench.fitting.train",  # the model and dataset records (their own "files")
    "stagebench.llm.http",  # a server's answer and its "usage" (prompt_tokens, completion_tokens)
    "stagebench.llm.request",  # a cached Completion's own JSON (prompt_tokens, completion_tokens)
    "stagebench.fitting.tune",  # its own tuning.json record and the config's raw "stages"
}  # fmt: skip


def test_no_module_but_the_record_reads_manifest_keys_by_string():
    """stagebench.record is the one module that knows the manifest's keys; everyone else reads
    its typed records (a subscript or .get() with one of those keys, anywhere else, is a finding)."""
    found = []
    for path in SRC.rglob("*.py"):
        mod = module_name(path)
        if mod in {"stagebench.record", *NOT_MANIFEST_READERS}:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and node.args and isinstance(node.args[0], ast.Constant)):  # fmt: skip
                key = node.args[0].value
            if isinstance(key, str) and key in MANIFEST_JSON_KEYS:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {key!r}")
    assert not found, "manifest keys read outside stagebench.record:\n" + "\n".join(found)


#: the names that tell a measure's kind or family apart: only stagebench.metrics may ask them; every other
#: module reads what a measure supports (``m.supports``, stagebench.metrics.supports)
MEASURE_KIND_NAMES = {"Delegated", "UNAFFECTED", "MONOTONE", "FAMILY", "FAMILIES"}


def test_no_module_outside_the_metrics_asks_a_measures_kind_or_family():
    """Native and delegated measures answer the same calls (issue 82): outside ``stagebench.metrics`` no
    ``isinstance`` on a measure's class, no comparison of a family's name, no family table read."""
    found = []
    for path in SRC.rglob("*.py"):
        if module_name(path).startswith("stagebench.metrics"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(SRC)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} if len(node.args) > 1 else set()
                if names & {"Measure", "Delegated"}:
                    found.append(f"{where}: isinstance on a measure's class")
            elif isinstance(node, ast.Compare) and any(
                    isinstance(n, ast.Attribute) and n.attr == "family" for n in [node.left, *node.comparators]):
                found.append(f"{where}: a family's name compared")
            elif isinstance(node, ast.Name) and node.id in MEASURE_KIND_NAMES:
                found.append(f"{where}: {node.id}")
    assert not found, "a measure's kind asked outside stagebench.metrics:\n" + "\n".join(found)


#: what the CLI may import besides stagebench.api: how it prints (renderers), the declarations its
#: flags are checked by, the Ray driver's watch, and words and constants
CLI_MAY_IMPORT = {
    "stagebench.api", "stagebench.errors", "stagebench.version", "stagebench.params",
    "stagebench.cache",  # human_bytes, for cache ls
    "stagebench.config", "stagebench.results.check", "stagebench.data.synthetic",  # flag declarations
    "stagebench.report", "stagebench.report.tables", "stagebench.reproductions",  # renderers
    "stagebench.judgments.planning", "stagebench.judgments.design", "stagebench.judgments.grades",  # choices, defaults,
    "stagebench.results.segments",
    "stagebench.results.scoring",  # words
    "stagebench.runtime.cluster.supervisor",  # run on a Ray engine: the driver in a watched child, connected before its run
}  # fmt: skip


def test_the_cli_is_a_thin_layer_on_the_python_api():
    """Every command is a call of a public function of stagebench.api (what the CLI can do, a script
    can), and the CLI (the package stagebench.cli) imports nothing that computes besides it."""
    graph = imports()
    cli = {m for m in graph if m == "stagebench.cli" or m.startswith("stagebench.cli.")}
    used = set().union(*(graph[m] for m in cli)) - cli
    assert used <= CLI_MAY_IMPORT, used - CLI_MAY_IMPORT
    import stagebench.api as api

    commands = [f for path in sorted((SRC / "cli").glob("*.py")) for f in ast.parse(path.read_text(encoding="utf-8")).body
                if isinstance(f, ast.FunctionDef) and f.name.startswith("cmd_")]  # fmt: skip
    assert len(commands) >= 18
    for f in commands:
        called = {n.attr for n in ast.walk(f) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                  and n.value.id == "api"}  # fmt: skip
        assert called, f"cli.{f.name} calls no stagebench.api function"
        assert called <= set(api.__all__) | {"HoleViews"}, f"cli.{f.name} uses private api names {called - set(api.__all__)}"


def test_the_tests_share_one_scripted_chat_backend():
    """A chat backend written in a test (a class with ``complete`` or ``identity``) derives from
    tests/scripted_chat.py's ScriptedChat, the one scripted backend, instead of spelling out the
    protocol again."""
    tests = SRC.parents[1] / "tests"
    found = []
    for path in tests.rglob("*.py"):
        if path.name == "scripted_chat.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.bases and any(
                    isinstance(f, ast.FunctionDef) and f.name in ("complete", "identity") for f in node.body):  # fmt: skip
                found.append(f"{path.relative_to(tests)}:{node.lineno} {node.name}")
    assert not found, "chat backends that do not derive from ScriptedChat: " + ", ".join(found)


#: the most modules the top of the package may hold (less ``__init__`` and ``__main__``): past it, a new
#: module belongs in the package of its job (docs/architecture.md)
TOP_LEVEL_CEILING = 19


def test_the_top_level_holds_no_more_modules_than_its_ceiling():
    top = sorted(p.stem for p in SRC.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(top) <= TOP_LEVEL_CEILING, f"{len(top)} modules at the top of src/stagebench (ceiling {TOP_LEVEL_CEILING}): {top}"


def test_every_child_process_a_test_starts_runs_the_trees_own_src():
    """Issue 72: a child process given the repository (not its src) imports whatever stagebench the
    venv installed; every test that sets PYTHONPATH sets it with conftest's one helper."""
    tests = Path(__file__).resolve().parent
    here = Path(__file__).resolve()
    bad = [f"{p.relative_to(tests)}:{i}" for p in sorted(tests.rglob("*.py")) if p.name != "conftest.py" and p != here
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
           if "PYTHONPATH" in line and "child_path(" not in line and not line.lstrip().startswith(("#", '"""'))]  # fmt: skip
    assert not bad, f"PYTHONPATH set without tests.conftest.child_path: {bad}"
