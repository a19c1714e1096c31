# shellcheck shell=bash
# shellcheck disable=SC2034  # variables here are used by the scripts that source this file
# Shared shell functions for scripts/test, scripts/demo and .ci/run.
#
# Source it from a bash script that runs with `set -euo pipefail`:
#
#     . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Every function is idempotent: running a script twice changes nothing the second time.
# Targets the machine kind Pier is developed on: Debian 12, Docker Engine running, the
# packages below coming from Debian.

# The repository root (the folder above scripts/).
PIER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PIER_ROOT

# Postgres as the test suite and the demo use it. ensure_postgres sets PIER_PG_PORT to the
# port the 15/main cluster really listens on (5432 unless someone changed it).
PIER_PG_VERSION="${PIER_PG_VERSION:-15}"
PIER_PG_CLUSTER="${PIER_PG_CLUSTER:-main}"
PIER_PG_PORT="${PIER_PG_PORT:-5432}"
# At least this many connections (ensure_postgres raises a smaller max_connections).
PIER_PG_MAX_CONNECTIONS="${PIER_PG_MAX_CONNECTIONS:-500}"

# --- output -------------------------------------------------------------------------------

if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then
    _pier_bold=$'\e[1m' _pier_red=$'\e[31m' _pier_yellow=$'\e[33m' _pier_reset=$'\e[0m'
else
    _pier_bold='' _pier_red='' _pier_yellow='' _pier_reset=''
fi

# section TITLE: a header line, so that a long CI log is easy to scan.
section() {
    printf '\n%s==> %s%s\n' "$_pier_bold" "$*" "$_pier_reset"
}

info() {
    printf '    %s\n' "$*"
}

warn() {
    printf '%swarning:%s %s\n' "$_pier_yellow" "$_pier_reset" "$*" >&2
}

die() {
    printf '%serror:%s %s\n' "$_pier_red" "$_pier_reset" "$*" >&2
    exit 1
}

# as_root CMD...: runs CMD as root (directly when we are root, else through sudo).
as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -- "$@"
    else
        die "'$*' needs root and sudo is not installed; run this script as root"
    fi
}

# as_postgres CMD...: runs CMD as the postgres OS user (peer authentication on the socket),
# from / so that psql does not complain about an unreadable working directory.
as_postgres() {
    if [[ $EUID -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && sudo -u postgres -- "$@")
    fi
}

# wait_until SECONDS DESCRIPTION CMD...: polls CMD (every 0.2 s) until it succeeds or
# SECONDS have passed; returns 1 after printing DESCRIPTION on timeout. No fixed sleep: it
# returns as soon as CMD succeeds.
wait_until() {
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            printf '%serror:%s timed out after %ss waiting for %s\n' \
                "$_pier_red" "$_pier_reset" "$seconds" "$what" >&2
            return 1
        fi
        sleep 0.2
    done
}

# --- packages -----------------------------------------------------------------------------

# The Debian packages the test suite needs (the demo adds curl). The second line is for the
# extra engines of tests/targets/engines.rs (tests/support/engines.rs): network namespaces
# and veths (iproute2), nsenter (util-linux), their dockerd's storage (fuse-overlayfs), an
# sshd and ssh for ssh:// targets, socat to forward the test registry into a namespace.
# openssh-server's own sshd service is not needed; the tests start theirs in a namespace.
# curl is the client that loads an app through a remote host's pier proxy, inside that
# host's namespace (tests/targets/remote_proxy.rs).
PIER_TEST_PACKAGES=(postgresql docker-registry busybox-static chromium chromium-driver nginx
    iproute2 util-linux fuse-overlayfs openssh-server openssh-client socat curl)

_pier_apt_updated=0

# package_installed PKG: true if dpkg has PKG fully installed.
package_installed() {
    [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == "ii"* ]]
}

# ensure_packages PKG...: installs, with apt-get, those of PKG that are not installed yet.
# Runs `apt-get update` at most once per script run, and only if something is missing.
ensure_packages() {
    command -v dpkg-query >/dev/null 2>&1 ||
        die "this script expects a Debian-like system (dpkg/apt-get); install $* by hand"
    local missing=() pkg
    for pkg in "$@"; do
        package_installed "$pkg" || missing+=("$pkg")
    done
    if ((${#missing[@]} == 0)); then
        info "packages present: $*"
        return 0
    fi
    info "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get -q -o DPkg::Lock::Timeout=300)
    if ((_pier_apt_updated == 0)); then
        as_root "${apt[@]}" update || die "apt-get update failed"
        _pier_apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y --no-install-recommends \
        "${missing[@]}" || die "apt-get install ${missing[*]} failed"
}

# --- postgres -----------------------------------------------------------------------------

_pier_pg_ready() {
    pg_isready -q -h 127.0.0.1 -p "$PIER_PG_PORT"
}

# ensure_postgres: makes the Debian 15/main cluster run and answer on 127.0.0.1, with a
# role `pier` (password `pier`, LOGIN SUPERUSER: the tests create and drop their own
# databases) and a database `pier`. Sets PIER_PG_PORT.
ensure_postgres() {
    local v=$PIER_PG_VERSION c=$PIER_PG_CLUSTER
    command -v pg_lsclusters >/dev/null 2>&1 ||
        die "pg_lsclusters not found: install the postgresql package (ensure_packages postgresql)"

    # The package normally creates the cluster; a machine configured not to (or one where
    # it was dropped) gets one here.
    if ! pg_lsclusters -h "$v" "$c" >/dev/null 2>&1; then
        info "creating postgres cluster $v/$c"
        as_root pg_createcluster "$v" "$c" >/dev/null
    fi

    # pg_lsclusters -h: version cluster port status owner datadir logfile
    local port status
    read -r _ _ port status _ < <(pg_lsclusters -h "$v" "$c")
    PIER_PG_PORT=$port
    export PIER_PG_PORT
    if [[ "$status" != online* ]]; then
        info "starting postgres cluster $v/$c (port $port)"
        as_root pg_ctlcluster "$v" "$c" start ||
            die "pg_ctlcluster $v $c start failed; see /var/log/postgresql/postgresql-$v-$c.log"
    fi
    wait_until 60 "postgres on 127.0.0.1:$port (pg_isready)" _pier_pg_ready ||
        die "postgres did not become ready; see /var/log/postgresql/postgresql-$v-$c.log"

    # The suite runs test binaries side by side, each test with its own database, pool and
    # Pier processes: Debian's 100 connections run out ("too many clients already").
    local max
    max="$(as_postgres psql -X -At -p "$port" -d postgres -c 'SHOW max_connections')"
    if ((max < PIER_PG_MAX_CONNECTIONS)); then
        info "raising max_connections of $v/$c from $max to $PIER_PG_MAX_CONNECTIONS (a restart)"
        as_postgres psql -X -q -p "$port" -d postgres \
            -c "ALTER SYSTEM SET max_connections = $PIER_PG_MAX_CONNECTIONS" >/dev/null
        as_root pg_ctlcluster "$v" "$c" restart ||
            die "pg_ctlcluster $v $c restart failed; see /var/log/postgresql/postgresql-$v-$c.log"
        wait_until 60 "postgres on 127.0.0.1:$port (pg_isready)" _pier_pg_ready ||
            die "postgres did not come back; see /var/log/postgresql/postgresql-$v-$c.log"
    fi

    # Role and database, created only when missing. The role's attributes and password are
    # (re)set every time so that an old, different `pier` role does not break the tests.
    as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$port" -d postgres <<'SQL' >/dev/null
SELECT 'CREATE ROLE pier'
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pier')
\gexec
ALTER ROLE pier WITH LOGIN SUPERUSER CREATEDB PASSWORD 'pier';
SELECT 'CREATE DATABASE pier OWNER pier'
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'pier')
\gexec
SQL
    # Prove what the tests rely on: a password login over TCP.
    PGPASSWORD=pier PGCONNECT_TIMEOUT=5 psql -X -q -At -h 127.0.0.1 -p "$port" -U pier \
        -d pier -c 'SELECT 1' >/dev/null ||
        die "cannot log in as pier/pier on 127.0.0.1:$port; check pg_hba.conf allows \
scram-sha-256 (or md5) for 127.0.0.1/32"
    info "postgres $v/$c ready on 127.0.0.1:$port (role pier, database pier)"
}

# --- docker -------------------------------------------------------------------------------

# check_docker: the engine answers, and shares this machine's loopback (the tests and the
# demo bind registries and published ports on 127.0.0.1 and expect the engine to reach
# them, and us to reach the containers' published ports).
check_docker() {
    command -v docker >/dev/null 2>&1 ||
        die "the docker CLI is not installed; Pier needs a running Docker Engine"
    case "${DOCKER_HOST:-}" in
        "" | unix://*) ;;
        *)
            die "DOCKER_HOST=$DOCKER_HOST: the tests and the demo need an engine that \
shares this machine's loopback (127.0.0.1 registries, ports published on 127.0.0.1). Unset \
DOCKER_HOST or point it at a local unix:// socket."
            ;;
    esac
    local version
    if ! version="$(docker version --format '{{.Server.Version}}' 2>&1)"; then
        die "the Docker Engine does not answer (docker version: ${version//$'\n'/ }). Start \
it (e.g. 'systemctl start docker' or 'dockerd &') and make sure this user may use its socket."
    fi
    info "docker engine $version at ${DOCKER_HOST:-the default socket}"
}

# --- misc ---------------------------------------------------------------------------------

# random_hex [BYTES]: BYTES (default 32) random bytes as hex, from /dev/urandom.
random_hex() {
    od -An -tx1 -N"${1:-32}" /dev/urandom | tr -d ' \n'
}

# http_ok URL: true if URL answers 2xx within 2 seconds. Quiet either way.
http_ok() {
    curl -fs -o /dev/null --max-time 2 "$1" 2>/dev/null
}

# port_listening PORT: true if something listens on 127.0.0.1:PORT (bash's /dev/tcp).
port_listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
