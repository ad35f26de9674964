#!/usr/bin/env bash
# Creates (or reuses) the project's virtualenv with pinned dependencies.
# Usage: scripts/bootstrap.sh VENV_DIR LOCK_FILE
set -euo pipefail
VENV="${1:-.venv}"
LOCK="${2:-requirements/lock-spark-4.3.txt}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"

find_python() {
    for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3.10 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if ! PY="$(find_python)"; then
    echo "spark-sqs: Python 3.10 or newer with the venv module is required but was not found." >&2
    echo "  Install it (e.g. 'apt-get install python3 python3-venv') or set PYTHON=/path/to/python3." >&2
    exit 1
fi

if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
    echo "spark-sqs: Java 17 or newer is required by Spark but 'java' was not found." >&2
    echo "  Install a JDK 17+ (e.g. 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME." >&2
    exit 1
fi
JAVA_BIN="java"
[ -n "${JAVA_HOME:-}" ] && JAVA_BIN="$JAVA_HOME/bin/java"
JAVA_MAJOR="$("$JAVA_BIN" -version 2>&1 | awk -F\" '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}')"
if [ -z "$JAVA_MAJOR" ] || [ "$JAVA_MAJOR" -lt 17 ]; then
    echo "spark-sqs: Java 17 or newer is required by Spark; found '${JAVA_MAJOR:-unknown}' from $JAVA_BIN." >&2
    echo "  Install a JDK 17+ and put it first on PATH or set JAVA_HOME." >&2
    exit 1
fi

# A venv of another Python than the one asked for (PYTHON=...) is rebuilt, not reused.
if [ -n "${PYTHON:-}" ] && [ -x "$VENV/bin/python" ]; then
    WANT="$("$PY" -c 'import sys; print(sys.version_info[:2])')"
    HAVE="$("$VENV/bin/python" -c 'import sys; print(sys.version_info[:2])' 2>/dev/null || true)"
    [ "$WANT" = "$HAVE" ] || rm -rf "$VENV"
fi

STAMP="$VENV/.spark-sqs-lock"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && cmp -s "$STAMP" "$HERE/$LOCK"; then
    exit 0
fi

echo "spark-sqs: creating virtualenv $VENV from $LOCK (once) ..." >&2
LOG="$(mktemp)"
if ! { "$PY" -m venv "$VENV" &&
    "$VENV/bin/python" -m pip install --upgrade pip &&
    "$VENV/bin/python" -m pip install -r "$HERE/$LOCK" &&
    "$VENV/bin/python" -m pip install --no-deps -e "$HERE" &&
    # PySpark comes from the lock, not from the package (an extra): the import checks it is there.
    "$VENV/bin/python" -c "from spark_sqs import SqsDataSource"; } >"$LOG" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$LOG" | tail -40 >&2
    echo "spark-sqs: setting up $VENV failed (full log: $LOG)" >&2
    exit 1
fi
rm -f "$LOG"
cp "$HERE/$LOCK" "$STAMP"
