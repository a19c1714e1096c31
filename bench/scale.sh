#!/usr/bin/env bash
# History at scale (issue 12): 100,000 deployments over 20 apps, a million journal steps
# and a million deliveries, seeded with generate_series into a fresh database that a real
# `pier serve` migrated; then p50/p95 of the overview, an app page, a deployment page, the
# deliveries page and the JSON API (50 requests each, curl, keep-alive off), and the claim
# query's time against the same query on an empty database.
#
# Usage: bash bench/scale.sh   (after `cargo build --release`; CARGO_TARGET_DIR honoured)
set -euo pipefail
cd "$(dirname "$0")/.."
PIER="${CARGO_TARGET_DIR:-target}/release/pier"
[[ -x "$PIER" ]] || { echo "build first: cargo build --release" >&2; exit 1; }
PG="postgres://pier:pier@127.0.0.1:${PIER_PG_PORT:-5432}"
DB="pier_scale_$$"
PORT=$((30000 + RANDOM % 2000))
TOKEN="scale-bench-admin-token-$$-long-enough"
dir=$(mktemp -d)
cleanup() {
    [[ -n "${pid:-}" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS ${DB}_empty WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
psql -q "$PG/postgres" -c "CREATE DATABASE $DB" -c "CREATE DATABASE ${DB}_empty"

config() {
    cat <<TOML
[server]
listen = "127.0.0.1:$PORT"
database_url = "$PG/$1"
admin_token = "$TOKEN"
workers = 1
[proxy]
state_file = "$dir/routes.json"
[[registries]]
host = "127.0.0.1:1"
insecure = true
TOML
    for i in $(seq 0 19); do
        printf '[[apps]]\nname = "app%s"\nimage = "127.0.0.1:1/demo/app%s"\ntag = "main"\nport = 8080\n' "$i" "$i"
    done
}

start_pier() {
    config "$1" >"$dir/pier.toml"
    "$PIER" --config "$dir/pier.toml" serve >"$dir/pier.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do
        curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    cat "$dir/pier.log" >&2
    exit 1
}
stop_pier() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

# Migrate both databases with Pier itself.
start_pier "${DB}_empty"; stop_pier
start_pier "$DB"; stop_pier

t0=$(date +%s.%N)
psql -q -v ON_ERROR_STOP=1 "$PG/$DB" <<'SQL'
ALTER TABLE deployments DISABLE TRIGGER deployments_notify;
INSERT INTO deliveries (id, source, event_key, received_at, verdict, reason, events)
SELECT gen_random_uuid(), 'local', 'seed-' || g, now() - g * interval '2 seconds',
       CASE WHEN g % 10 = 0 THEN 'queued' ELSE 'ignored' END, 'seeded',
       '[{"event":{"repository":"demo/app","tag":"main"}}]'
FROM generate_series(1, 1000000) g;
INSERT INTO deployments (id, app, trigger, image, requested_tag, claimed_digest, resolved_digest,
                         state, attempt, outcome, created_at, started_at, finished_at)
SELECT gen_random_uuid(), 'app' || (g % 20), 'webhook', '127.0.0.1:1/demo/app' || (g % 20), 'main',
       'sha256:' || md5(g::text) || md5(g::text), 'sha256:' || md5(g::text) || md5(g::text),
       CASE WHEN g % 7 = 0 THEN 'failed' WHEN g % 5 = 0 THEN 'superseded' ELSE 'succeeded' END,
       1, 'seeded', now() - g * interval '20 seconds', now() - g * interval '20 seconds',
       now() - g * interval '20 seconds' + interval '600 ms'
FROM generate_series(1, 100000) g;
INSERT INTO deployment_steps (deployment_id, step, state, intent, result, attempt, started_at, finished_at)
SELECT d.id, s.step, 'succeeded', '{}', '{}', 1, d.started_at, d.finished_at
FROM deployments d,
     unnest(ARRAY['resolve','pull','verify','create','stop_old','start','health','switch','retire','rollback'])
       AS s(step);
ALTER TABLE deployments ENABLE TRIGGER deployments_notify;
ANALYZE;
SQL
t1=$(date +%s.%N)
counts=$(psql -qtA "$PG/$DB" -c "SELECT (SELECT count(*) FROM deployments) || ' deployments, ' ||
  (SELECT count(*) FROM deployment_steps) || ' steps, ' || (SELECT count(*) FROM deliveries) || ' deliveries'")
echo "seeded $counts in $(echo "$t1 - $t0" | bc) s"

start_pier "$DB"
dep=$(psql -qtA "$PG/$DB" -c "SELECT id FROM deployments WHERE app = 'app3' ORDER BY created_at DESC LIMIT 1")

# p50 and p95 of 50 GETs, in ms.
timed() {
    local url="http://127.0.0.1:$PORT$1" code
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$url")
    for _ in $(seq 1 50); do
        curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $TOKEN" "$url"
    done | sort -n | awk -v path="$1" -v code="$code" '{ t[NR] = $1 * 1000 }
        END { printf "| `%s` | %s | %.1f | %.1f |\n", path, code, t[int(NR*0.5)], t[int(NR*0.95)] }'
}
echo
echo "| page | status | p50 ms | p95 ms |"
echo "| --- | ---: | ---: | ---: |"
timed "/"
timed "/apps/app3"
timed "/deployments/$dep"
timed "/deliveries"
timed "/deliveries?verdict=queued"
timed "/api/apps"
timed "/api/apps/app3"
timed "/api/deployments/$dep"
stop_pier

# Claiming: the worker's claim statement (rolled back) on the full and the empty database,
# with one queued deployment in each. Median of 20 runs of EXPLAIN ANALYZE's execution time.
claim_ms() {
    psql -q "$PG/$1" -c "INSERT INTO deployments (id, app, trigger, image) VALUES (gen_random_uuid(), 'app0', 'webhook', 'x')" >/dev/null
    for _ in $(seq 1 20); do
        psql -qtA "$PG/$1" <<'SQL' | grep -o 'Execution Time: [0-9.]*' | awk '{print $3}'
BEGIN;
EXPLAIN ANALYZE WITH candidate AS (
  SELECT d.id FROM deployments d
  WHERE (d.state = 'running' AND (d.lease_expires_at < now()
         OR (d.lease_key IS NOT NULL AND NOT pier_holder_alive(d.lease_key))))
     OR (d.state = 'queued' AND NOT EXISTS (
           SELECT 1 FROM deployments r WHERE r.app = d.app AND r.state = 'running'))
  ORDER BY (d.state = 'running') DESC, d.created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE deployments d SET state = 'running', attempt = d.attempt + 1, lease_owner = 'bench',
  lease_expires_at = now() + interval '30 s', started_at = coalesce(d.started_at, now())
FROM candidate WHERE d.id = candidate.id RETURNING d.*;
ROLLBACK;
SQL
    done | sort -n | awk '{ t[NR] = $1 } END { printf "%.3f", t[int((NR+1)/2)] }'
}
echo
echo "claim: $(claim_ms "$DB") ms with the seeded history, $(claim_ms "${DB}_empty") ms on an empty table (median of 20, EXPLAIN ANALYZE execution time)"
