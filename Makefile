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

.PHONY: setup system-deps jars spark-conf demo sample test bench bench-1m lint clean

setup: system-deps $(VENV)/.installed jars spark-conf

# Java runs Spark; Maven fetches the Delta and s3a jars. Installed from Debian if missing.
system-deps:
	@command -v java >/dev/null && command -v mvn >/dev/null || { \
	  echo "installing Java and Maven from Debian"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    openjdk-17-jre-headless maven; }

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

sample: setup
	$(BIN)/python -m tokenmill.jobs.sample_crawl --out $(SAMPLE)

# The embedded default: local Spark, Delta under ./lake, the generated sample crawl.
demo: sample
	$(BIN)/spark-submit jobs/ingest.py --root $(LAKE) --input '$(SAMPLE)/*.warc.gz'
	$(BIN)/spark-submit jobs/dedup.py --root $(LAKE)

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python tests/bench/bench_ingest.py
	$(BIN)/python tests/bench/bench_dedup.py --docs 100000

# The 1M-document dedup run (tens of minutes on 2 cores).
bench-1m: setup
	$(BIN)/python tests/bench/bench_dedup.py --docs 100000 --docs 1000000

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(LAKE) $(SAMPLE) .pytest_cache
