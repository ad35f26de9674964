"""The tests. tests/unit mirrors spark_sqs/ (the tests of ``spark_sqs/X/Y.py`` are
``tests/unit/X/test_Y.py``, and ``test_Y_<aspect>.py`` beside it when one file would be too
long); tests/integration runs real Spark on moto, named by behaviour; tests/sim tests the
simulator in sim/; tests/tooling tests bench/ and chaos/. The test doubles are in
tests/fakes.py, the builders of test data in tests/factories.py; tests/helpers.py helps the
tests that run real Spark."""

from pathlib import Path

# The repository, wherever a test file sits below tests/.
REPO = Path(__file__).resolve().parents[1]
