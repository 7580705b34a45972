"""Bad input, second round (issue 24): one test per defect kind. Each fails on the code before
the fix and asserts the exit code, the one line naming the file, key or row, and that nothing
is lost or left behind."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import stagebench
from stagebench.cache import Cache
from stagebench.errors import ConfigError, DataError, StagebenchError
from stagebench.llm.http import OpenAIBackend
from stagebench.llm.request import ChatRequest, RequestFailed
from tests.conftest import stagebench_cli
from tests.cli.test_bad_input import assert_clean, beir, config, error_line, expect_error, run_main

PLUGIN = "class Boom:\n    def score(self, query, docs):\n        return [float(len(d)) for d in docs]\n"


def plugin_config(tmp_path: Path, body: str = PLUGIN, module: str = "plug24", params: str = "top_n: 3") -> Path:
    (tmp_path / f"{module}.py").write_text(body)
    stages = (f"  - {{name: bm25, type: bm25, params: {{top_k: 5}}}}\n"
              f"  - {{name: p, type: plugin, target: '{module}:Boom', inputs: [bm25], params: {{{params}}}}}")  # fmt: skip
    return config(tmp_path, stages)


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- data loss


@pytest.mark.parametrize("foreign,named", [
    (".git/HEAD", ".git/ is a folder no stagebench run wrote"),
    (".notes.md", ".notes.md was not written by stagebench (not listed in manifest.json)"),
    ("runs/production_baseline.trec", "runs/production_baseline.trec was not written by stagebench"),
    ("plots/my_figure.png", "plots/my_figure.png was not written by stagebench"),
    ("plots/deep/er/x.txt", "plots/deep/ is a folder no stagebench run wrote"),
])  # fmt: skip
def test_a_results_folder_holding_anything_a_run_did_not_write_is_refused(tmp_path, capsys, foreign, named):
    cfg = config(tmp_path)
    assert run_main(capsys, "run", cfg)[0] == 0
    out = tmp_path / "out"
    (out / foreign).parent.mkdir(parents=True, exist_ok=True)
    (out / foreign).write_text("the user's")
    before = tree(out)
    expect_error(capsys, "run", cfg, contains=(str(out), named, "refusing to replace it"))
    assert tree(out) == before
    assert not list(tmp_path.glob(".out.*"))


def test_a_file_a_run_wrote_and_the_user_edited_is_refused(tmp_path, capsys):
    cfg = config(tmp_path)
    assert run_main(capsys, "run", cfg)[0] == 0
    md = tmp_path / "out" / "stage_table.md"
    md.write_text(md.read_text() + "\nmy annotation\n")
    expect_error(capsys, "run", cfg, contains=("stage_table.md was changed after stagebench wrote it",))
    assert md.read_text().endswith("my annotation\n")


def test_kept_files_are_carried_into_the_new_folder(tmp_path, capsys):
    cfg = config(tmp_path)
    assert run_main(capsys, "run", cfg)[0] == 0
    (tmp_path / "out" / "expected.yaml").write_text("stages: {bm25: {nDCG@10: 0.5}}\n")
    assert run_main(capsys, "run", cfg)[0] == 0
    assert (tmp_path / "out" / "expected.yaml").read_text() == "stages: {bm25: {nDCG@10: 0.5}}\n"


def test_an_output_that_is_a_symbolic_link_is_refused_before_anything_runs(tmp_path, capsys):
    cfg = config(tmp_path)
    real = tmp_path / "real"
    real.mkdir()
    (real / "mine.txt").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(real)
    expect_error(capsys, "run", cfg, "--output", link, contains=(str(link), "is a symbolic link", "give the real folder"))
    assert link.is_symlink() and (real / "mine.txt").read_text() == "x"
    assert not list(tmp_path.glob(".link.*"))
    assert_clean(tmp_path)  # nothing computed


SAVE_UNDER_A_FULL_DISK = """
import resource, signal, sys
import stagebench
r = stagebench.run(sys.argv[1], output=sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past 4 KB fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    r.save(sys.argv[3])
except OSError as exc:
    print("failed:", exc)
"""


@pytest.mark.slow
def test_result_save_into_its_own_folder_changes_nothing_and_a_failed_copy_keeps_the_old_one(tmp_path):
    cfg = config(tmp_path)
    r = stagebench.run(cfg)
    before = tree(r.output)
    assert r.save(r.output) == r.output
    assert tree(r.output) == before
    dest = r.save(tmp_path / "copy")
    assert tree(dest) == before
    script = tmp_path / "save.py"
    script.write_text(SAVE_UNDER_A_FULL_DISK)
    p = subprocess.run([sys.executable, str(script), str(cfg), str(tmp_path / "out2"), str(dest)], capture_output=True,
                       text=True, cwd=tmp_path)  # fmt: skip
    assert "failed:" in p.stdout and "File too large" in p.stdout, p.stdout + p.stderr
    assert tree(dest) == before  # the old copy is intact
    assert not list(tmp_path.glob(".copy.*"))  # and no staging folder is left
    (dest / "runs" / "mine.trec").write_text("the user's")
    with pytest.raises(StagebenchError, match="runs/mine.trec was not written by stagebench"):
        r.save(dest)
    assert (dest / "runs" / "mine.trec").read_text() == "the user's"


def test_generate_data_and_train_reranker_refuse_a_nested_or_hidden_foreign_file(tmp_path, capsys):
    data = tmp_path / "data"
    assert run_main(capsys, "generate-data", "--output", data, "--products", "400", "--test-queries", "3",
                    "--train-queries", "0")[0] == 0  # fmt: skip
    (data / ".my-notes").write_text("keep")
    expect_error(capsys, "generate-data", "--output", data, "--products", "400",
                 contains=(str(data), ".my-notes was not written by stagebench"))  # fmt: skip
    assert (data / ".my-notes").read_text() == "keep"
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    from stagebench.files import file_digest

    (model / "stagebench_training.json").write_text(json.dumps({"files": {"config.json": file_digest(model / "config.json")}}))
    (model / "sub" / "mine.bin").write_text("keep")
    cfg = config(tmp_path, top=f"name: t\ntraining: {{output: {model}, negatives: {{from_stage: bm25}}}}")
    expect_error(capsys, "train-reranker", cfg, contains=(str(model), "sub/ is a folder no stagebench run wrote"))
    assert (model / "sub" / "mine.bin").read_text() == "keep"


def test_a_staging_folder_not_marked_as_ours_is_never_removed(tmp_path, capsys):
    cfg = config(tmp_path)
    theirs = tmp_path / ".out.partial-999999"  # the name a dead run's staging folder would have, but not ours
    theirs.mkdir()
    (theirs / "x").write_text("keep")
    assert run_main(capsys, "run", cfg)[0] == 0
    assert (theirs / "x").read_text() == "keep"


# --------------------------------------------------------------------------- the API key


HITS: list = []


class _Quiet(http.server.BaseHTTPRequestHandler):
    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def log_message(self, *a):
        pass


class _Recorder(_Quiet):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.body()
        HITS.append((self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"data": [{"id": "m"}]}')

    do_POST = do_GET


def serve(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def test_a_redirect_never_carries_the_api_key_to_another_address(monkeypatch):
    other, other_url = serve(_Recorder)

    class Redirect(_Quiet):
        def do_GET(self):  # noqa: N802
            self.body()
            self.send_response(302)
            self.send_header("Location", f"{other_url}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET

    srv, url = serve(Redirect)
    monkeypatch.setenv("SB_TEST_KEY", "sk-secret")
    backend = OpenAIBackend(f"{url}/v1", "m", api_key_env="SB_TEST_KEY", timeout=5, retries=0)
    with pytest.raises(StagebenchError, match=f"HTTP 302, a redirect to {other_url}/v1/models; stagebench does not follow"):
        backend.check()
    with pytest.raises(StagebenchError, match="a redirect to"):
        backend.complete(ChatRequest((("user", "hi"),), 5, 0.0, 1))
    assert HITS == []  # the other address never heard from us, key or not
    srv.shutdown()
    other.shutdown()


class Trickle(_Quiet):
    """A server that answers a byte every 0.2 s, for up to 8 s."""

    def do_POST(self):  # noqa: N802
        self.body()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(40):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass


def test_timeout_is_a_deadline_for_the_whole_request_not_per_read():
    srv, url = serve(Trickle)
    backend = OpenAIBackend(f"{url}/v1", "m", timeout=1.0, retries=0)
    t0 = time.monotonic()
    with pytest.raises(RequestFailed, match="timed out: no complete answer within timeout"):
        backend.complete(ChatRequest((("user", "hi"),), 5, 0.0, 1))
    assert time.monotonic() - t0 < 2.5
    srv.shutdown()


def answering(body: bytes):
    class Answer(_Quiet):
        def do_POST(self):  # noqa: N802
            self.body()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:  # the client stopped reading: what this test wants
                pass

    return Answer


def test_an_answer_of_unbounded_size_is_refused_not_cached():
    big = json.dumps({"choices": [{"message": {"content": "[1] > [2]" + " " * (5 << 20)}}]}).encode()
    srv, url = serve(answering(big))
    with pytest.raises(StagebenchError, match="the answer is larger than 4,194,304 bytes"):
        OpenAIBackend(f"{url}/v1", "m", timeout=10, retries=0).complete(ChatRequest((("user", "hi"),), 5, 0.0, 1))
    srv.shutdown()


def test_usage_fields_of_the_wrong_type_are_one_error_naming_the_field():
    body = json.dumps({"choices": [{"message": {"content": "[1]"}}], "usage": {"prompt_tokens": "many"}}).encode()
    srv, url = serve(answering(body))
    with pytest.raises(StagebenchError, match=r"usage.prompt_tokens = 'many', not a token count"):
        OpenAIBackend(f"{url}/v1", "m", timeout=10, retries=0).complete(ChatRequest((("user", "hi"),), 5, 0.0, 1))
    srv.shutdown()


def test_a_base_url_naming_the_endpoint_fails_at_load(tmp_path, capsys):
    stages = ("  - {name: bm25, type: bm25}\n  - {name: l, type: llm_rerank, inputs: [bm25], params: {backend: openai, "
              "model: m, base_url: 'http://127.0.0.1:9/v1/chat/completions'}}")  # fmt: skip
    cfg = config(tmp_path, stages)
    expect_error(capsys, "validate", cfg, contains=(str(cfg), "base_url", "names an endpoint; give the API's root"))


# --------------------------------------------------------------------------- wrong numbers with exit 0


def test_compare_verifies_per_query_values_against_the_manifest(tmp_path, capsys):
    cfg = config(tmp_path)
    assert run_main(capsys, "run", cfg)[0] == 0
    assert run_main(capsys, "run", cfg, "--output", tmp_path / "b")[0] == 0
    pq = tmp_path / "b" / "per_query.csv"
    pq.write_text(pq.read_text().replace("0.", "1.", 3))
    expect_error(capsys, "compare", tmp_path / "out", tmp_path / "b",
                 contains=(str(pq), "changed after the run (its sha256 differs"))  # fmt: skip


def test_depth_runs_are_verified_like_every_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = plugin_config(tmp_path, params="top_n: 3, depths: [2, 3]")
    assert run_main(capsys, "run", cfg)[0] == 0
    depth_run = tmp_path / "out" / "runs" / "p@2.trec"
    assert depth_run.is_file()
    lines = depth_run.read_text().splitlines(keepends=True)
    q, _, d, rank, _, tag = lines[-1].split()  # a valid edit: the last document moved to the top
    depth_run.write_text("".join(lines[:-1]) + f"{q} Q0 {d} {rank} 999.0 {tag}\n")
    expect_error(capsys, "table", tmp_path / "out", contains=(str(depth_run), "changed after the run"))


def test_check_never_falls_back_silently_to_the_stored_table(tmp_path, capsys):
    cfg = config(tmp_path)
    assert run_main(capsys, "run", cfg)[0] == 0
    out = tmp_path / "out"
    exp = tmp_path / "exp.yaml"
    assert run_main(capsys, "check", out, exp, "--update")[0] == 0
    (out / "qrels.trec").unlink()
    expect_error(capsys, "check", out, exp, contains=(str(out / "qrels.trec"), "missing", "--stored-table"))
    for f in (out / "runs").iterdir():
        f.unlink()
    expect_error(capsys, "check", out, exp, contains=("missing",))
    code = main_out(capsys, "check", out, exp, "--stored-table")
    assert code[0] == 0 and "read from stage_table.json as asked (--stored-table), verified" in code[1]
    (out / "stage_table.json").write_text((out / "stage_table.json").read_text().replace('"nDCG@10": 0', '"nDCG@10": 1'))
    expect_error(capsys, "check", out, exp, "--stored-table", contains=("stage_table.json", "changed after the run"))


def main_out(capsys, *args) -> tuple[int, str]:
    from stagebench.cli import main

    code = main([str(a) for a in args])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("bom_in", ["qrels", "run"])
def test_a_utf8_bom_is_never_part_of_the_first_id(tmp_path, capsys, bom_in):
    """A Windows editor's BOM in one of the two files: the first query must still match."""
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    bom = {"qrels": b"\xef\xbb\xbf" if bom_in == "qrels" else b"", "run": b"\xef\xbb\xbf" if bom_in == "run" else b""}
    qrels.write_bytes(bom["qrels"] + b"q1 0 d1 3\nq1 0 d2 1\nq2 0 d3 2\n")
    run.write_bytes(bom["run"] + b"q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\nq2 Q0 d3 1 1.0 t\n")
    code, out = main_out(capsys, "eval", qrels, run, "-m", "nDCG@10", "--json")
    assert code == 0 and json.loads(out) == {"nDCG@10": 1.0}


def test_a_null_query_id_in_an_esci_parquet_is_one_error_naming_the_row(tmp_path, capsys):
    d = tmp_path / "esci"
    assert run_main(capsys, "generate-data", "--output", d, "--products", "400", "--test-queries", "3",
                    "--train-queries", "0")[0] == 0  # fmt: skip
    ex = pd.read_parquet(d / "shopping_queries_dataset_examples.parquet")
    ex["query_id"] = ex["query_id"].astype("float64")
    ex.loc[5, "query_id"] = None
    ex.to_parquet(tmp_path / "shopping_queries_dataset_examples.parquet", index=False)
    (tmp_path / "shopping_queries_dataset_products.parquet").write_bytes((d / "shopping_queries_dataset_products.parquet").read_bytes())
    cfg = config(tmp_path, dataset=f"{{loader: esci, path: {tmp_path}, split: test}}")
    expect_error(capsys, "run", cfg, contains=("example_id 5: query_id is null",))
    assert_clean(tmp_path)


def test_a_name_ending_in_a_newline_is_not_a_name(tmp_path, capsys):
    cfg = config(tmp_path, '  - {name: "bm25\\n", type: bm25}')
    expect_error(capsys, "validate", cfg, contains=(str(cfg), "stages[0].name: 'bm25\\n' is not a valid name"))


@pytest.mark.parametrize("qrels,run,msg", [
    ({"q": {"d": 1}}, {"q": {"d": float("nan")}}, "run['q']['d']: score nan is not a finite number"),
    ({"q": {"d": 1}}, {"q": {"d": float("inf")}}, "score inf is not a finite number"),
    ({"q": {"d": 1.5}}, {"q": {"d": 1.0}}, "qrels['q']['d']: grade 1.5 is not an integer"),
    ({1.0: {"d": 1}}, {"q": {"d": 1.0}}, "query id 1.0 is a float"),
    ({"q": {"d": 1}}, {"q": {"d x": 1.0}}, "document id 'd x' is empty or holds whitespace"),
])  # fmt: skip
def test_the_api_checks_ids_scores_and_grades_as_the_file_readers_do(qrels, run, msg):
    with pytest.raises(DataError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        stagebench.evaluate(qrels, run, ["nDCG@10"])


def test_the_api_reads_integer_ids_as_the_loaders_do():
    assert stagebench.evaluate({1: {7: 3, 8: 0}}, {"1": {"7": 2.0, "8": 1.0}}, ["nDCG@10"]).means == {"nDCG@10": 1.0}


# --------------------------------------------------------------------------- one line, before compute


def test_a_latin1_prompt_or_corpus_file_is_one_line_naming_the_byte(tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes("Rank for {query}: caf\xe9 {passages}\n".encode("latin-1"))
    stages = (f"  - {{name: bm25, type: bm25}}\n  - {{name: l, type: llm_rerank, inputs: [bm25], params: "
              f"{{prompt: {prompt}}}}}")  # fmt: skip
    expect_error(capsys, "validate", config(tmp_path, stages),
                 contains=(f"{prompt}:1: the prompt file is not UTF-8 text (byte 0xe9 at byte offset 21",))  # fmt: skip
    data = beir(tmp_path / "latin")
    (data / "corpus.jsonl").write_bytes((data / "corpus.jsonl").read_bytes() + '{"_id": "d9", "text": "caf\xe9"}\n'.encode("latin-1"))
    cfg = config(tmp_path, dataset=f"{{loader: beir, path: {data}}}")
    expect_error(capsys, "run", cfg, contains=(f"{data / 'corpus.jsonl'}:9: the JSONL file is not UTF-8 text",))
    assert_clean(tmp_path)


@pytest.mark.slow
def test_max_length_beyond_what_the_model_reads_fails_at_load(tmp_path, capsys):
    stages = "  - {name: bm25, type: bm25}\n  - {name: c, type: cross_encoder, inputs: [bm25], params: {max_length: 1000}}"
    cfg = config(tmp_path, stages)
    expect_error(capsys, "validate", cfg, contains=(str(cfg), "stages[1] (c).params.max_length: 1000 is more tokens than "
                                                    "model cross-encoder/ms-marco-MiniLM-L-12-v2 reads (512"))  # fmt: skip


def test_a_memory_error_is_one_line_and_leaves_nothing_partial(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    greedy = "class Boom:\n    def score(self, query, docs):\n        return list(bytearray(1 << 50))\n"
    cfg = plugin_config(tmp_path, greedy, "greedy24")
    expect_error(capsys, "run", cfg, contains=("out of memory while running run",))
    assert_clean(tmp_path, cache_entries=None)


@pytest.mark.parametrize("args,msg", [
    (("--products", "50"), "--products 50: must be at least 400"),
    (("--test-queries", "-3"), "--test-queries -3: must be at least 1"),
    (("--train-queries", "-1"), "--train-queries -1: must be at least 0"),
])  # fmt: skip
def test_generate_data_refuses_counts_that_cannot_make_a_dataset(tmp_path, capsys, args, msg):
    expect_error(capsys, "generate-data", "--output", tmp_path / "d", *args, contains=(msg,))
    assert not (tmp_path / "d").exists()


def test_a_manifest_without_evaluation_is_one_line(tmp_path, capsys):
    cfg = config(tmp_path)
    assert run_main(capsys, "run", cfg)[0] == 0
    m = tmp_path / "out" / "manifest.json"
    d = json.loads(m.read_text())
    del d["evaluation"]
    m.write_text(json.dumps(d))
    for cmd in ("table", "show"):
        expect_error(capsys, cmd, tmp_path / "out", *(["q1"] if cmd == "show" else []),
                     contains=(str(m), "not a complete stagebench manifest (no evaluation)"))  # fmt: skip


def test_a_gain_map_that_misses_a_grade_fails_before_any_stage(tmp_path, capsys):
    cfg = config(tmp_path, evaluation=", gain: {3: 1.0, 2: 0.5, 1: 0.1}")  # grade 0 is in the qrels too
    expect_error(capsys, "run", cfg, contains=(str(cfg), "evaluation.gain", "no gain for grade 0"))
    assert_clean(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a read-only folder")
def test_a_writable_output_in_a_read_only_parent_is_refused_before_loading(tmp_path, capsys):
    parent = tmp_path / "ro"
    (parent / "out").mkdir(parents=True)
    if subprocess.run(["mount", "--bind", str(parent), str(parent)], capture_output=True).returncode != 0:
        pytest.skip("this machine does not allow bind mounts")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(parent)], check=True, capture_output=True)
        inner = tmp_path / "inner"
        inner.mkdir()
        subprocess.run(["mount", "--bind", str(inner), str(parent / "out")], check=True, capture_output=True)
        try:
            cfg = config(tmp_path)
            expect_error(capsys, "run", cfg, "--output", parent / "out",
                         contains=(str(parent), "is not writable"))  # fmt: skip
            assert_clean(tmp_path)
        finally:
            subprocess.run(["umount", str(parent / "out")], capture_output=True)
    finally:
        subprocess.run(["umount", str(parent)], capture_output=True)


@pytest.mark.slow
def test_ray_address_pointing_at_something_that_is_not_ray_fails_in_seconds(tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = silent.getsockname()[1]
    cfg = config(tmp_path, top="name: t\nengine: ray")
    t0 = time.monotonic()
    r = stagebench_cli("run", cfg, cwd=tmp_path, env={**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"}, timeout=120)
    assert r.returncode == 2, r.stderr
    line = error_line(r.stderr)
    assert f"$RAY_ADDRESS: 127.0.0.1:{port} accepts connections but does not answer as a Ray cluster does" in line
    assert time.monotonic() - t0 < 30
    silent.close()


# --------------------------------------------------------------------------- consistency


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_are_handled_as_ctrl_c(tmp_path, sig):
    slow = ("import time\nclass Boom:\n    def score(self, query, docs):\n"
            "        open('started', 'w').close()\n        time.sleep(30)\n        return [0.0] * len(docs)\n")  # fmt: skip
    cfg = plugin_config(tmp_path, slow, "slow24")
    proc = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg)], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.time() + 60
    while not (tmp_path / "started").exists() and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    line = error_line(err)
    assert f"terminated ({signal.Signals(sig).name})" in line and "resumes" in line
    assert_clean(tmp_path, cache_entries=None)
    assert any(r["meta"].get("stage") == "bm25" for r in Cache(tmp_path / "cache").list())


def test_the_depth_table_is_the_same_however_long_scoring_took(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jittery = ("import random, time\nclass Boom:\n    def score(self, query, docs):\n"
               "        time.sleep(random.random() * 0.3)\n        return [float(len(d)) for d in docs]\n")  # fmt: skip
    cfg = plugin_config(tmp_path, jittery, "jitter24", params="top_n: 3, depths: [1, 2, 3]")
    assert run_main(capsys, "run", cfg)[0] == 0
    first = {f: (tmp_path / "out" / f).read_bytes() for f in ("stage_table.txt", "stage_table.json", "stage_table.csv")}
    assert run_main(capsys, "run", cfg, "--recompute")[0] == 0
    assert {f: (tmp_path / "out" / f).read_bytes() for f in first} == first
    assert "Depth sweep" in first["stage_table.txt"].decode()


def test_compare_matches_measures_whatever_their_order_or_case(tmp_path, capsys):
    a = config(tmp_path, evaluation="")
    assert run_main(capsys, "run", a)[0] == 0
    b = tmp_path / "b.yaml"
    b.write_text(a.read_text().replace("[nDCG@10, RR@10, R@5]", "[r@5, ndcg@10, rr@10, P@5]").replace(
        f"output: {tmp_path / 'out'}", f"output: {tmp_path / 'b'}"))  # fmt: skip
    assert run_main(capsys, "run", b)[0] == 0
    code, out = main_out(capsys, "compare", tmp_path / "out", tmp_path / "b")
    assert code == 0
    assert "measures in only one folder (not compared): P@5" in out
    assert all(f"bm25   {m}" in out for m in ("nDCG@10", "RR@10", "R@5"))


def test_a_config_larger_than_any_config_is_refused_unread(tmp_path, capsys):
    cfg = tmp_path / "huge.yaml"
    cfg.write_text("name: t\n# " + "x" * (2 << 20) + "\n")
    expect_error(capsys, "validate", cfg, contains=(str(cfg), "more than the 1,048,576 it may have"))
    with pytest.raises(ConfigError, match="more than the 1,048,576"):
        stagebench.load_config(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("content", [b"not a GGUF file at all " * 100, b"GGUF\x03\x00\x00\x00" + b"\xff" * 64])
def test_a_gguf_file_that_is_not_one_is_one_line_naming_it(tmp_path, capsys, content):
    bad = tmp_path / "model.Q4_0.gguf"
    bad.write_bytes(content)
    stages = ("  - {name: bm25, type: bm25, params: {top_k: 5}}\n"
              f"  - {{name: llm, type: llm_rerank, inputs: [bm25], params: {{model: '{bad}', method: pointwise, top_n: 3}}}}")  # fmt: skip
    expect_error(capsys, "run", config(tmp_path, stages),
                 contains=("stage llm: model", f"cannot load from local GGUF file {bad} (", "Error"))  # fmt: skip
    assert not [r for r in Cache(tmp_path / "cache").list() if r["kind"] in ("models", "llm")]
    assert_clean(tmp_path, cache_entries=None)
