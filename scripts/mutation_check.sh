#!/usr/bin/env bash
# Mutation check of the idempotency engine (docs/mutation-testing.md); not part of `make test`.
#
#   bash scripts/mutation_check.sh [keys] [fingerprint] [engine] [redis_store]   (default: all)
#
# cosmic-ray changes one operator at a time in a module and runs that module's narrow test
# selection (below); a mutant the tests still pass with "survived". It mutates a copy of the
# tracked files in a temporary directory, never this work tree, and the tests run against a
# redis-server it starts on a free loopback port and a database of their own
# (${TEST_DATABASE_URL}_mut_<first module>), so other test runs are not disturbed.
#
# Environment: TEST_DATABASE_URL (default: make test's, postgres://postgres@127.0.0.1:5432/ordering,
# so the commands in the doc run as they are written), PY (default .venv/bin/python),
# MUTATION_TIMEOUT (seconds per mutant, default 300), MUTATION_OUT (reports, default
# ./mutation-reports), MUTATION_ONLY_<module>="function ..." (mutate only these functions of a
# module: the time box for engine.py and redis_store.py, see the doc), MUTATION_SURVIVORS_ONLY=1
# (keep the last session in MUTATION_OUT and run only its surviving mutants again).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY=${PY:-$root/.venv/bin/python}
bin=$(dirname "$PY")
: "${TEST_DATABASE_URL:=postgres://postgres@127.0.0.1:5432/ordering}"
out=${MUTATION_OUT:-$root/mutation-reports}
timeout=${MUTATION_TIMEOUT:-300}
modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(keys fingerprint engine redis_store)
mkdir -p "$out"

declare -A PATHS=(
  [keys]=idempotency/core/keys.py
  [fingerprint]=idempotency/core/fingerprint.py
  [engine]=idempotency/core/engine.py
  [redis_store]=idempotency/stores/redis_store.py
)
# Per module: the engine's contract suite files (run first: seconds), then the product's
# tests/idempotency files.
declare -A ENGINE_TESTS=(
  [keys]="contract/test_replay.py contract/test_database_only.py contract/test_tokens.py"
  [fingerprint]=""  # its unit tests and properties are where a canonical form is checked
  [engine]="contract/test_replay.py contract/test_database_only.py contract/test_database_claim.py contract/test_crash_windows.py contract/test_breaker.py contract/test_tokens.py"
  [redis_store]="contract/test_replay.py contract/test_tokens.py"
)
declare -A PRODUCT_TESTS=(
  [keys]="tests/idempotency/test_keys.py tests/idempotency/test_engine_storage.py"
  [fingerprint]="tests/idempotency/test_fingerprint.py"
  [engine]="tests/idempotency/test_engine_outcomes.py tests/idempotency/test_engine_storage.py"
  [redis_store]="tests/idempotency/test_redis_store.py tests/idempotency/test_tokens.py"
)
# Operators left out (docs/mutation-testing.md): every other replacement of an arithmetic or
# bitwise operator (one of each kind is kept) and comparisons turned into identity tests.
EXCLUDED_OPERATORS='"core/ReplaceBinaryOperator_.*_(Mul|Div|FloorDiv|Mod|Pow|RShift|LShift|BitOr|BitAnd|BitXor)$", "core/ReplaceComparisonOperator_.*_(Is|IsNot)$"'

work=$(mktemp -d)
redis_pid=""
cleanup() {
  [ -z "$redis_pid" ] || kill "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

tree="$work/tree"
mkdir -p "$tree"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$tree"

port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$work" \
  >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

db_url="${TEST_DATABASE_URL}_mut_${modules[0]}"  # one per run: runs may go side by side
cat >"$tree/mutation_tests.sh" <<EOF
#!/usr/bin/env bash
# One module's test selection, as cosmic-ray runs it for each mutant (from the copy).
set -eu
cd "$tree"
args=(-x -q -p no:cacheprovider --reuse-db -o addopts=)
engine=()
for f in \${ENGINE_TESTS}; do engine+=("idempotency/tests/\$f"); done
if [ \${#engine[@]} -gt 0 ]; then
  IDEMPOTENCY_STANDALONE=1 IDEMPOTENCY_TEST_DATABASE_URL="${db_url}_engine" \\
    IDEMPOTENCY_TEST_REDIS_URL="redis://127.0.0.1:$port/1" \\
    DJANGO_SETTINGS_MODULE=idempotency.tests.settings "$PY" -m pytest "\${args[@]}" "\${engine[@]}"
fi
DEBUG=1 DATABASE_URL="$db_url" REDIS_URL="redis://127.0.0.1:$port/0" \\
  "$PY" -m pytest "\${args[@]}" \${PRODUCT_TESTS}
EOF

summary="$out/summary.txt"
: >"$summary"
for module in "${modules[@]}"; do
  path=${PATHS[$module]:?unknown module $module (keys, fingerprint, engine, redis_store)}
  config="$work/$module.toml"
  session="$out/$module.sqlite"
  cat >"$config" <<EOF
[cosmic-ray]
module-path = "$path"
timeout = $timeout
excluded-modules = []
test-command = "env ENGINE_TESTS='${ENGINE_TESTS[$module]}' PRODUCT_TESTS='${PRODUCT_TESTS[$module]}' bash $tree/mutation_tests.sh"

[cosmic-ray.distributor]
name = "local"

[cosmic-ray.filters.operators-filter]
exclude-operators = [$EXCLUDED_OPERATORS]
EOF
  echo "[mutation] $module: baseline (the selection passes unmutated)"
  (cd "$tree" && ENGINE_TESTS="${ENGINE_TESTS[$module]}" PRODUCT_TESTS="${PRODUCT_TESTS[$module]}" \
    bash mutation_tests.sh >"$out/$module.baseline.log" 2>&1) ||
    { echo "[mutation] $module: the unmutated tests fail, see $out/$module.baseline.log"; exit 1; }
  if [ "${MUTATION_SURVIVORS_ONLY:-}" = 1 ] && [ -f "$session" ]; then
    # Run again only the mutants that survived last time (after tests were added).
    "$PY" -c 'import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); n = db.execute(
        "DELETE FROM work_results WHERE test_outcome = '"'SURVIVED'"'").rowcount; db.commit()
print(f"[mutation] again: {n} survivors of the last run")' "$session"
  else
    rm -f "$session"  # a fresh session
    (cd "$tree" && "$bin/cosmic-ray" init "$config" "$session" &&
      "$bin/cr-filter-operators" "$session" "$config")
  fi
  only_var="MUTATION_ONLY_$module"
  if [ -n "${!only_var:-}" ] && [ "${MUTATION_SURVIVORS_ONLY:-}" != 1 ]; then
    # Time box: mutate only the named functions (cosmic-ray's definition names).
    "$PY" - "$session" "${!only_var}" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
wanted = set(sys.argv[2].split())
pending = db.execute(
    "SELECT m.job_id, m.definition_name FROM mutation_specs m "
    "WHERE m.job_id NOT IN (SELECT job_id FROM work_results)"
).fetchall()
skip = [job for job, name in pending if name not in wanted]
db.executemany(
    "INSERT INTO work_results (job_id, worker_outcome, output, test_outcome, diff) "
    "VALUES (?, 'SKIPPED', 'outside the time box', NULL, '')",
    [(job,) for job in skip],
)
db.commit()
print(f"[mutation] time box: {len(pending) - len(skip)} mutants in {sorted(wanted)}, {len(skip)} skipped")
EOF
  fi
  echo "[mutation] $module: running mutants"
  (cd "$tree" && "$bin/cosmic-ray" exec "$config" "$session")
  "$bin/cr-report" --show-output "$session" >"$out/$module.report.txt" || true
  "$bin/cr-report" "$session" | tail -4 | sed "s/^/$module: /" | tee -a "$summary"
done
echo "[mutation] reports in $out"
