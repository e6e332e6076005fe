# One command per habit. `make demo` and `make test` set up whatever is missing first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
SAMPLE := data/sample-crawl
LAKE ?= lake

# spark-submit finds its Python (and pyspark) on PATH; the loopback address keeps Spark quiet
# and local.
export PATH := $(BIN):$(PATH)
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(BIN)/python

.PHONY: setup system-deps jars spark-conf kenlm demo sample train report history history-stop test bench bench-1m lint clean

setup: system-deps $(VENV)/.installed jars spark-conf kenlm

# Java runs Spark; Maven fetches the Delta and s3a jars; cmake, a C++ compiler and Boost build
# fasttext, kenlm and KenLM's lmplz; headless Chromium renders the HTML report in its test.
# Installed from Debian if missing.
DEBIAN_PACKAGES := openjdk-17-jre-headless maven cmake g++ libboost-program-options-dev \
  libboost-system-dev libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev \
  chromium
system-deps:
	@{ command -v java && command -v mvn && command -v cmake && command -v g++ && \
	  command -v chromium && \
	  test -e /usr/include/boost/program_options.hpp && test -e /usr/include/boost/test && \
	  test -e /usr/include/zlib.h && test -e /usr/include/bzlib.h && \
	  test -e /usr/include/lzma.h; } >/dev/null || { \
	  echo "installing from Debian: $(DEBIAN_PACKAGES)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    $(DEBIAN_PACKAGES); }

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

jars: .jars/.fetched
.jars/.fetched: infra/jvm/pom.xml
	rm -rf .jars
	mvn -q -B -f infra/jvm/pom.xml dependency:copy-dependencies \
	  -DoutputDirectory=$(CURDIR)/.jars
	touch $@

# Point the virtualenv's Spark at the jars (see infra/spark/spark-defaults.conf.in).
spark-conf: $(VENV)/.installed jars
	@conf=$$($(BIN)/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/conf; \
	mkdir -p $$conf; \
	jars=$$(ls $(CURDIR)/.jars/*.jar | paste -sd, -); \
	sed "s#@JARS@#$$jars#" infra/spark/spark-defaults.conf.in > $$conf/spark-defaults.conf

# KenLM's lmplz and build_binary (training the perplexity models), built from the kenlm sdist.
kenlm: .tools/kenlm/bin/lmplz
.tools/kenlm/bin/lmplz: infra/kenlm/build.sh | $(VENV)/.installed
	PIP=$(BIN)/pip infra/kenlm/build.sh .tools/kenlm

sample: setup
	$(BIN)/python -m tokenmill.jobs.sample_crawl --out $(SAMPLE)

# The embedded default: local Spark, Delta under ./lake, the generated sample crawl.
demo: sample
	$(BIN)/spark-submit jobs/ingest.py --root $(LAKE) --input '$(SAMPLE)/*.warc.gz'
	$(BIN)/spark-submit jobs/langid.py --root $(LAKE)
	$(BIN)/spark-submit jobs/urlfilter.py --root $(LAKE)
	test -f $(LAKE)/models/lm/en/model.json || $(BIN)/spark-submit jobs/train_lm.py --root $(LAKE)
	$(BIN)/spark-submit jobs/quality.py --root $(LAKE)
	$(BIN)/spark-submit jobs/dedup.py --root $(LAKE)
	$(BIN)/spark-submit jobs/pii.py --root $(LAKE)
	$(BIN)/spark-submit jobs/train_tokenizer.py --root $(LAKE)
	$(BIN)/spark-submit jobs/tokenize_shards.py --root $(LAKE)
	$(MAKE) --no-print-directory train
	$(BIN)/spark-submit jobs/report.py --root $(LAKE)

# The tiny model for a few dozen steps on the lake's shards (2 CPU processes, FSDP2 over
# gloo); a fresh run each time (the demo's lake changes between runs).
TRAIN_ARGS ?= --config tiny
train: setup
	rm -rf $(LAKE)/train/tiny
	$(BIN)/torchrun --standalone --nproc_per_node=2 train/train.py \
	  --manifest $(LAKE)/shards/manifest.json $(TRAIN_ARGS)

# One HTML page from the lake: funnel, drop reasons, histograms, clusters, PII, mixture,
# cost and gates ($(LAKE)/_reports/latest.html).
report: setup
	$(BIN)/spark-submit jobs/report.py --root $(LAKE)

# The Spark History Server on the lake's event logs (every job writes them to
# $(LAKE)/_spark_events): http://localhost:18080. `make history-stop` stops it.
history: setup
	mkdir -p $(LAKE)/_spark_events
	SPARK_HISTORY_OPTS="-Dspark.history.fs.logDirectory=file://$(abspath $(LAKE))/_spark_events" \
	  $$($(BIN)/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/sbin/start-history-server.sh
history-stop:
	$$($(BIN)/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/sbin/stop-history-server.sh

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python tests/bench/bench_ingest.py
	$(BIN)/python tests/bench/bench_filters.py
	$(BIN)/python tests/bench/bench_pii_tokenize.py
	$(BIN)/python tests/bench/bench_train.py
	$(BIN)/python tests/bench/bench_dedup.py --docs 100000

# The 1M-document dedup run (tens of minutes on 2 cores).
bench-1m: setup
	$(BIN)/python tests/bench/bench_dedup.py --docs 100000 --docs 1000000

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(LAKE) $(SAMPLE) .pytest_cache
