#!/usr/bin/env bash
# The engine alone: build its wheel from ./idempotency, install it into a virtualenv of its
# own with only its declared dependencies (no extras) and the test tools, and run the suite it
# ships (idempotency.tests) there, from an empty directory: no product code on the path.
#
# The virtualenv is kept in .venv-engine/<hash of the dependency set> and reused while the
# engine's pyproject.toml and the test tools stay the same; only the fresh wheel is reinstalled.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY=${PY:-.venv/bin/python}
: "${TEST_DATABASE_URL:?set TEST_DATABASE_URL (postgres://...)}"
: "${TEST_REDIS_URL:?set TEST_REDIS_URL (redis://...)}"
test_tools=("pytest==9.2.0" "pytest-django==4.14.0" "psycopg[binary]==3.3.9")

key=$( (cat idempotency/pyproject.toml; printf '%s\n' "${test_tools[@]}"; python3 --version) |
  sha256sum | cut -c1-16)
venv="$root/.venv-engine/$key"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m pip wheel -q --no-deps --wheel-dir "$work/dist" ./idempotency
rm -rf idempotency/build
wheel=$(ls "$work"/dist/*.whl)

if [ ! -f "$venv/.complete" ]; then
  echo "[engine] new virtualenv for this dependency set: $venv"
  rm -rf "$root/.venv-engine"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q -U pip
  "$venv/bin/python" -m pip install -q "$wheel" "${test_tools[@]}"
  touch "$venv/.complete"
else
  "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
fi

cd "$work"
echo "[engine] running the engine's suite from its wheel ($(basename "$wheel"))"
IDEMPOTENCY_STANDALONE=1 \
IDEMPOTENCY_TEST_DATABASE_URL="${TEST_DATABASE_URL}_engine" \
IDEMPOTENCY_TEST_REDIS_URL="$TEST_REDIS_URL" \
DJANGO_SETTINGS_MODULE=idempotency.tests.settings \
  "$venv/bin/python" -m pytest --pyargs idempotency.tests -p no:cacheprovider ${ENGINE_PYTEST_ARGS:-}
