# The README's two commands: `make demo` and `make test`. Each sets up its own virtualenv.
VENV ?= .venv
LOCK ?= requirements/lock-spark-4.3.txt
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
LINTED := spark_sqs devtools tests notebooks chaos bench sim
# pytest processes (pytest-xdist), each test file on one of them: most of the suite waits on
# Spark and SQS rather than on a core (make test: 25 min in one process, 17 in two, 2 cores).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

.PHONY: venv demo test test-oldest test-newest-python unit lint format clean chaos chaos-quick chaos-cluster chaos-sink chaos-poison soak bench conformance bench-sink bench-driver bench-window bench-inflight bench-memory sim mutations

venv:
	@scripts/bootstrap.sh $(VENV) $(LOCK)

demo: venv
	$(PY) -m devtools.demo $(DEMO_ARGS)

test: venv
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The fault harness (docs/chaos.md): SIGKILLed queries and failing SQS calls, then a count of
# lost, duplicated and left-behind messages. CHAOS_ARGS passes options, e.g. --fault-rate 0.3.
chaos: venv
	$(PY) -m chaos $(CHAOS_ARGS)

# The short run CI makes: standard and FIFO queues, two kills each, and one scenario on a
# standalone Spark cluster (executor kills, speculative attempts; needs Java, like Spark).
chaos-quick: venv
	$(PY) -m chaos --quick $(CHAOS_ARGS)

# The cluster scenarios only, at make chaos's size: a standalone master and two workers started
# from the pip package, executor JVMs SIGKILLed mid-batch, speculative copies of slowed
# receivers, a write-then-skip sink and the S3 journal (docs/chaos.md).
chaos-cluster: venv
	$(PY) -m chaos --scenarios standard-cluster fifo-cluster fifo-journal-delete-cluster $(CHAOS_ARGS)

# The sink round trip (docs/chaos.md): source -> writeStream.format("sqs") into a FIFO queue,
# with the quick run's parameters (300 messages, 2 kills; several minutes, not in chaos-quick).
chaos-sink: venv
	$(PY) -m chaos --quick --scenarios fifo-sqs-sink $(CHAOS_ARGS)

# A message that fails every batch holding it, under poisonMessagePolicy=deadLetter (docs/chaos.md).
chaos-poison: venv
	$(PY) -m chaos --quick --scenarios standard-poison $(CHAOS_ARGS)

# Steady traffic for SOAK_SECONDS with kills and faults throughout, then SOAK_STEADY seconds more
# into the last run (no kills), whose processes' RSS is reported (flat after warm-up?); then
# the same count.
SOAK_SECONDS ?= 600
SOAK_STEADY ?= 600
soak: venv
	$(PY) -m chaos --soak $(SOAK_SECONDS) --steady $(SOAK_STEADY) --scenarios standard fifo $(CHAOS_ARGS)

# The same tests on the oldest supported PySpark (4.0) and Python (3.10), in its own virtualenv.
# The unit tests and the end-to-end tests whose path differs on 4.0/4.1 (latestOffset without a
# start, initialOffset after latestOffset, no read limits): the rest does not depend on the version.
OLDEST_TESTS ?= tests/unit tests/integration/test_end_to_end.py \
	tests/integration/test_commit_and_replay.py tests/integration/test_crash_recovery.py \
	tests/integration/test_fifo.py tests/integration/test_flow_control.py \
	tests/integration/test_journal_ownership.py tests/integration/test_packaging.py \
	tests/integration/test_progress_metrics.py
# Python 3.10 and 3.13 from PATH, else from pyenv's versions (CI's machine has both there).
find_python = $(firstword $(foreach p,python$(1) $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python$(1)),$(shell "$(p)" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, "$(1)".split("."))))' 2>/dev/null && echo "$(p)")))
PYTHON_OLDEST ?= $(call find_python,3.10)
PYTHON_NEWEST ?= $(call find_python,3.13)

# Runs on Python 3.10, the oldest supported Python, so that both floors are tested at once.
test-oldest:
	@[ -n "$(PYTHON_OLDEST)" ] || { echo "spark-sqs: test-oldest needs Python 3.10 (python3.10 on PATH or pyenv); set PYTHON_OLDEST=/path/to/python3.10" >&2; exit 1; }
	@PYTHON=$(PYTHON_OLDEST) scripts/bootstrap.sh .venv-spark4.0 requirements/lock-spark-4.0.txt
	PYSPARK_PYTHON=$(abspath .venv-spark4.0/bin/python) PYSPARK_DRIVER_PYTHON=$(abspath .venv-spark4.0/bin/python) \
		.venv-spark4.0/bin/python -m pytest $(XDIST) $(OLDEST_TESTS) $(PYTEST_ARGS)

# Benchmarks against a plain boto3 consumer (15-30 min); results in bench/results/README.md.
# BENCH_ARGS="--quick" is a smoke test of a few minutes. matplotlib and psutil are bench-only.
bench: venv
	$(PY) -m pip install -q -r requirements/bench.txt
	$(PY) -m bench $(BENCH_ARGS)

# The simulated SQS against moto and LocalStack (docs/simulation.md). Builds .venv-localstack
# (Python 3.13, a few minutes, once); plain `make test` skips the LocalStack column.
conformance: venv
	@mkdir -p build
	$(PY) -c "from pathlib import Path; from bench.servers import ensure_localstack_venv; \
		ensure_localstack_venv(Path('build/localstack-install.log'))"
	CONFORMANCE_REQUIRE_LOCALSTACK=1 $(PY) -m pytest tests/sim/test_conformance.py -v $(PYTEST_ARGS)

# The SQS sink against a plain boto3 SendMessageBatch loop at equal concurrency (moto, 20 ms
# delay proxy; a few minutes). Prints the medians and their ratio as JSON.
bench-sink: venv
	$(PY) -m bench.sink $(BENCH_ARGS)

# The driver's ceiling without Spark (issue 14): the reader's driver calls in one process, its
# receivers in worker processes, a stub SQS (fixed delay per call) and a request-counting S3.
# Full grid (receivers x messages per batch x drop set) by default; BENCH_ARGS="--quick" runs a
# few small points in under 3 minutes. Results: bench/results/driver.json and driver.png.
bench-driver: venv
	$(PY) -m pip install -q -r requirements/bench.txt
	$(PY) -m bench.driver $(BENCH_ARGS)

# The duplicate window's memory and CPU in one executor worker, up to 15 million ids
# (bench/results/window.md), projected to 50,000 msg/s for duplicateWindow's 600 s.
bench-window: venv
	$(PY) -m bench.window $(BENCH_ARGS)

# SQS's in-flight limit (about 120,000 per queue) as a throughput bound per acknowledgement mode
# (issue 14): seconds from receive to delete, stamped inside an embedded moto, through Spark, for
# the default mode and deleteAfterJournal at two maxMessagesPerTrigger values (about 6 minutes;
# BENCH_ARGS="--quick" is smaller). Results: bench/results/inflight.md and inflight.json.
bench-inflight: venv
	$(PY) -m bench.inflight $(BENCH_ARGS)

# The receivers' memory bound (maxBytesPerReceiver) with 1 MiB bodies, through Spark: a Python
# worker's peak RSS against the limit, and without a limit as a baseline (about 5 minutes;
# BENCH_ARGS="--quick" runs one limit). Results: bench/results/receiver-memory.md and .json.
bench-memory: venv
	$(PY) -m pip install -q -r requirements/bench.txt
	$(PY) -m bench.receiver_memory $(BENCH_ARGS)

# The deterministic simulation (docs/simulation.md): SEEDS seeds, standard and FIFO queues as
# each seed picks; a failing seed prints the command that replays it. SIM_ARGS passes options,
# e.g. --fifo, --fixed-delete-mode, --first 1000.
SEEDS ?= 300
sim: venv
	$(PY) -m sim --seeds $(SEEDS) $(SIM_ARGS)

# Each fix of the exactly-once issue reverted in memory, one at a time: does the simulation find it?
mutations: venv
	$(PY) -m sim.mutations $(SIM_ARGS)

# The unit tests on the newest supported Python (3.13) with the newest PySpark's lock.
test-newest-python:
	@[ -n "$(PYTHON_NEWEST)" ] || { echo "spark-sqs: test-newest-python needs Python 3.13 (python3.13 on PATH or pyenv); set PYTHON_NEWEST=/path/to/python3.13" >&2; exit 1; }
	@PYTHON=$(PYTHON_NEWEST) scripts/bootstrap.sh .venv-py3.13 requirements/lock-spark-4.3.txt
	PYSPARK_PYTHON=$(abspath .venv-py3.13/bin/python) PYSPARK_DRIVER_PYTHON=$(abspath .venv-py3.13/bin/python) \
		.venv-py3.13/bin/python -m pytest $(XDIST) tests/unit $(PYTEST_ARGS)

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: venv
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

format: venv
	$(PY) -m ruff format $(LINTED)
	$(PY) -m ruff check --fix $(LINTED)

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
