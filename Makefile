# The README's two commands: `make demo` and `make test`. Each sets up its own virtualenv.
VENV ?= .venv
LOCK ?= requirements/lock-spark-4.3.txt
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: venv demo test unit lint format clean

venv:
	@scripts/bootstrap.sh $(VENV) $(LOCK)

demo: venv
	$(PY) -m spark_sqs.demo $(DEMO_ARGS)

test: venv
	$(PY) -m ruff check spark_sqs tests
	$(PY) -m ruff format --check spark_sqs tests
	$(PY) -m pytest $(PYTEST_ARGS)

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: venv
	$(PY) -m ruff check spark_sqs tests
	$(PY) -m ruff format --check spark_sqs tests

format: venv
	$(PY) -m ruff format spark_sqs tests
	$(PY) -m ruff check --fix spark_sqs tests

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
