#!/usr/bin/env bash
# Installs everything the test suite needs (pinned in requirements/test.txt), then runs
# lint and the whole suite (given arguments: pytest with them). Run it inside a virtual
# environment: it installs into the interpreter it is given (PYTHON, default python3).
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
# The daemon replicas' tests start their own etcd on loopback: Debian's etcd-server.
if ! command -v etcd >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "scripts/test.sh: etcd (Debian's etcd-server) is missing and installing it needs root" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server
fi
echo "scripts/test.sh: installing the pinned toolchain (requirements/test.txt)" >&2
# --no-compile: pip would compile every module of every package (9,100 files, torch's and
# sympy's most of them); the suite imports 2,700 of them and compiles those on first import
# (bytecode writing is on below). In a fresh venv on a 2-core machine the install takes
# 50 s instead of 103 s, and the first imports 13 s more, once.
"$PY" -m pip install -q --no-compile --disable-pip-version-check -r requirements/test.txt
# Editable install with the pinned Cython (no isolated build environment): the kernels are
# built in place and the tests import them from this tree; every dependency comes from the lock.
echo "scripts/test.sh: building jitsched (editable)" >&2
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
"$PY" -m pip check
"$PY" -m ruff check .
# The suite starts hundreds of Python processes (commands, daemons, testbed children):
# they share the bytecode the first one compiles (in __pycache__, ignored by git). An
# environment that turns writing it off would have each compile jitsched anew: 9 % of
# the run time of the docs, command and bench entry point tests on a 2-core machine.
unset PYTHONDONTWRITEBYTECODE
# Named tests or options: one pytest run of exactly those.
if [ "$#" -gt 0 ]; then
    exec "$PY" -m pytest -q "$@"
fi
# The whole suite in two runs. Most tests share the machine's cores through pytest-xdist
# workers, a module's tests on one worker (its module-scoped fixtures are built once); the
# tests marked `alone` (they time wall-clock work, measure real TCP rates or build network
# namespaces) run after them, one at a time. Both runs always run; the script fails if
# either did.
rc=0
workers=$(nproc)
echo "scripts/test.sh: the suite but the 'alone' tests, on $workers workers" >&2
"$PY" -m pytest -q -n "$workers" --dist loadscope -m "not alone" || rc=$?
echo "scripts/test.sh: the 'alone' tests, one at a time" >&2
"$PY" -m pytest -q -m alone || rc=$((rc ? rc : $?))
exit "$rc"
