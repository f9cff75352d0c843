#!/usr/bin/env bash
# Writes requirements/test.txt anew: the newest releases the index serves of the test
# toolchain and of jitsched's runtime dependencies, resolved together in a scratch venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m venv "$work/venv"
vpy="$work/venv/bin/python"
"$vpy" -m pip install -q --upgrade pip setuptools wheel
# the tools the suite runs with (etcd3gw: the daemon replicas' tests), then the project's runtime dependencies (from pyproject.toml)
"$vpy" -m pip install -q pytest pytest-xdist pytest-timeout hypothesis ruff Cython build matplotlib etcd3gw
# the Kubernetes manifests' schema check (tests/test_deploy.py): the schemas ship in the package
"$vpy" -m pip install -q kubernetes-validate
# the PyTorch adapter's tests: the CPU build, pinned (a newer release from the index brings
# gigabytes of CUDA libraries); its local version label (+cpu) is left out of the lock
"$vpy" -m pip install -q torch==2.13.0
"$vpy" -m pip install -q --no-build-isolation .
{
    sed -n '1,3p' requirements/test.txt
    "$vpy" -m pip freeze --all --exclude jitsched | sed 's/^torch==\([^+]*\)+.*/torch==\1/' | sort -f
    tomli=$("$vpy" -m pip index versions tomli 2>/dev/null | sed -n 's/^tomli (\(.*\))$/\1/p')
    echo "tomli==${tomli} ; python_version < \"3.11\""
} > "$work/test.txt"
mv "$work/test.txt" requirements/test.txt
echo "requirements/test.txt: $(grep -c '==' requirements/test.txt) pins"
