#!/usr/bin/env bash
# Installs everything the test suite needs, then runs lint and the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# The testbed tests drive real kernel networking (ip netns, tc, bridges): Debian's iproute2.
if ! command -v tc >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "scripts/test.sh: iproute2 (ip, tc) is missing and installing it needs root" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2
fi
# Editable install: builds the Cython kernels in place, so the tests import them from this tree.
"$PY" -m pip install -q -e '.[test]'
"$PY" -m ruff check .
"$PY" -m pytest -q "$@"
