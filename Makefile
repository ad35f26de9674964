# The README's two commands: `make demo` and `make test`. Each sets up its own virtualenv.
VENV ?= .venv
LOCK ?= requirements/lock-spark-4.3.txt
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: venv demo test test-oldest unit lint format clean bench

venv:
	@scripts/bootstrap.sh $(VENV) $(LOCK)

demo: venv
	$(PY) -m spark_sqs.demo $(DEMO_ARGS)

test: venv
	$(PY) -m ruff check spark_sqs tests notebooks bench
	$(PY) -m ruff format --check spark_sqs tests notebooks bench
	$(PY) -m pytest $(PYTEST_ARGS)

# The same tests on the oldest supported PySpark (4.0), in its own virtualenv.
test-oldest:
	@scripts/bootstrap.sh .venv-spark4.0 requirements/lock-spark-4.0.txt
	PYSPARK_PYTHON=$(abspath .venv-spark4.0/bin/python) PYSPARK_DRIVER_PYTHON=$(abspath .venv-spark4.0/bin/python) \
		.venv-spark4.0/bin/python -m pytest $(PYTEST_ARGS)

# Benchmarks against a plain boto3 consumer (15-25 min); results in bench/results/README.md.
# BENCH_ARGS="--quick" is a smoke test of a few minutes. matplotlib and psutil are bench-only.
bench: venv
	$(PY) -m pip install -q -r requirements/bench.txt
	$(PY) -m bench $(BENCH_ARGS)

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: venv
	$(PY) -m ruff check spark_sqs tests notebooks bench
	$(PY) -m ruff format --check spark_sqs tests notebooks bench

format: venv
	$(PY) -m ruff format spark_sqs tests notebooks bench
	$(PY) -m ruff check --fix spark_sqs tests notebooks bench

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
