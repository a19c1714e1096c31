#!/usr/bin/env bash
# Pier's proxy against nginx, side by side in one run: the same static upstream (an nginx
# serving a small file), the same wrk settings, on this machine's loopback. Prints requests
# per second and latency percentiles for each, and Pier's ratios to nginx.
#
# Usage: bench/proxy.sh [SECONDS] [CONNECTIONS] [ROUNDS]   (defaults 10 s, 32 connections, 3)
# Needs: nginx and wrk (installed from Debian if missing), a release build of pier (built
# if missing or older than the sources). Both proxies get one core: nginx one worker,
# pier proxy one thread. Not part of CI. pier proxy reads its route from its state file: no database
# is needed (its database URL points at a closed port on purpose).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs="${1:-10}"
conns="${2:-32}"
rounds="${3:-3}"
threads=2

need() { command -v "$1" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }
need nginx nginx
need wrk wrk
cargo build --release --bin pier

dir=$(mktemp -d /tmp/pier-bench-proxy.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
upstream=$(free_port)
via_nginx=$(free_port)
via_pier=$(free_port)
admin=$(free_port)

mkdir -p "$dir/www"
head -c 1024 /dev/zero | tr '\0' 'x' >"$dir/www/index.html"
# The upstream and the nginx proxy are two nginx processes (one worker each), as the upstream
# and pier proxy are: each proxy gets one core's worth of process, never a process it shares
# with the upstream.
nginx_conf() { # NAME SERVER-BLOCK
    cat >"$dir/$1.conf" <<CONF
worker_processes 1;
pid $dir/$1.pid;
error_log $dir/$1-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    $2
}
CONF
    nginx -c "$dir/$1.conf" -p "$dir" -g 'daemon off;' &
    pids+=($!)
}
nginx_conf upstream "server { listen 127.0.0.1:$upstream; root $dir/www; }"
nginx_conf proxy "
    upstream app { server 127.0.0.1:$upstream; keepalive 64; }
    server {
        listen 127.0.0.1:$via_nginx;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
        }
    }"

cat >"$dir/pier.toml" <<CONF
[server]
database_url = "postgres://pier:pier@127.0.0.1:$(free_port)/none"
[proxy]
# One thread, as nginx has one worker here: the same cores for both.
threads = 1
admin = "127.0.0.1:$admin"
state_file = "routes.json"
[[apps]]
name = "bench"
image = "127.0.0.1:5000/bench/app"
port = 8080
strategy = "blue-green"
[apps.route]
listen = "127.0.0.1:$via_pier"
CONF
cat >"$dir/routes.json" <<JSON
[{"app": "bench", "version": 1, "upstream": "127.0.0.1:$upstream",
  "container_id": "none", "deployment_id": "00000000-0000-0000-0000-000000000000",
  "standby": null}]
JSON
RUST_LOG=error target/release/pier --config "$dir/pier.toml" proxy >"$dir/pier.log" 2>&1 &
pids+=($!)
pier_pid=$!

for port in "$upstream" "$via_nginx" "$via_pier"; do
    for _ in $(seq 1 100); do
        curl -fsS "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
        sleep 0.1
    done
done

# CPU time (user + system, in clock ticks) a process has used: per request, the figure that
# a noisy shared machine disturbs least (it counts work, not waiting).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
nginx_worker=$(pgrep -P "$(cat "$dir/proxy.pid")" | head -1)
run() { # NAME PORT [PID] -> "rps p50 p99" (ms); with PID, appends "requests ticks" to NAME.cpu
    local t0=0
    [[ -n "${3:-}" ]] && t0=$(ticks "$3")
    wrk -t"$threads" -c"$conns" -d"${secs}s" --latency "http://127.0.0.1:$2/" >"$dir/$1.wrk"
    [[ -n "${3:-}" ]] && echo "$(awk '/requests in/ {print $1}' "$dir/$1.wrk") $(($(ticks "$3") - t0))" >>"$dir/$1.cpu"
    local rps p50 p99
    rps=$(awk '/Requests\/sec/ {print $2}' "$dir/$1.wrk")
    p50=$(awk '$1 == "50%" {print $2}' "$dir/$1.wrk")
    p99=$(awk '$1 == "99%" {print $2}' "$dir/$1.wrk")
    echo "$rps $(ms "$p50") $(ms "$p99")"
}
ms() { # wrk prints 812.00us, 1.20ms, 1.01s
    local v=$1
    case "$v" in
        *us) awk -v x="${v%us}" 'BEGIN {printf "%.3f", x / 1000}' ;;
        *ms) awk -v x="${v%ms}" 'BEGIN {printf "%.3f", x}' ;;
        *s) awk -v x="${v%s}" 'BEGIN {printf "%.3f", x * 1000}' ;;
    esac
}

# Interleaved rounds, so that a noisy moment on the shared machine hits both proxies alike;
# each figure is the median over the rounds.
echo "wrk -t$threads -c$conns -d${secs}s x $rounds rounds, 1 KiB static answer, loopback, $(nproc) cores"
for r in $(seq 1 "$rounds"); do
    run direct "$upstream" >>"$dir/direct.rows"
    run nginx "$via_nginx" "$nginx_worker" >>"$dir/nginx.rows"
    run pier "$via_pier" "$pier_pid" >>"$dir/pier.rows"
done
median() { # FILE COLUMN
    awk -v c="$2" '{print $c}' "$1" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
read -r d_rps d_p50 d_p99 < <(echo "$(median "$dir/direct.rows" 1) $(median "$dir/direct.rows" 2) $(median "$dir/direct.rows" 3)")
read -r n_rps n_p50 n_p99 < <(echo "$(median "$dir/nginx.rows" 1) $(median "$dir/nginx.rows" 2) $(median "$dir/nginx.rows" 3)")
read -r p_rps p_p50 p_p99 < <(echo "$(median "$dir/pier.rows" 1) $(median "$dir/pier.rows" 2) $(median "$dir/pier.rows" 3)")
rss=$(awk '/VmHWM/ {print $2}' "/proc/$pier_pid/status")
printf '%-18s %12s %10s %10s\n' "" "req/s" "p50 ms" "p99 ms"
printf '%-18s %12s %10s %10s\n' "upstream directly" "$d_rps" "$d_p50" "$d_p99"
printf '%-18s %12s %10s %10s\n' "nginx proxy" "$n_rps" "$n_p50" "$n_p99"
printf '%-18s %12s %10s %10s\n' "pier proxy" "$p_rps" "$p_p50" "$p_p99"
for name in nginx pier; do echo "$name rounds (req/s p50 p99): $(tr '\n' ';' <"$dir/$name.rows")"; done
awk -v p="$p_rps" -v n="$n_rps" -v pp="$p_p99" -v np="$n_p99" 'BEGIN {
    printf "pier/nginx: throughput %.2fx (target >= 1.0x), p99 latency %.2fx (target <= 1.2x)\n", p / n, pp / np }'
cpu_per_request() { awk -v hz="$(getconf CLK_TCK)" '{n += $1; t += $2} END {printf "%.1f", t / hz * 1e6 / n}' "$dir/$1.cpu"; }
n_cpu=$(cpu_per_request nginx)
p_cpu=$(cpu_per_request pier)
echo "CPU per request: nginx proxy ${n_cpu} us, pier proxy ${p_cpu} us (pier/nginx $(awk -v p="$p_cpu" -v n="$n_cpu" 'BEGIN {printf "%.2f", p / n}')x)"
echo "pier proxy peak RSS: ${rss} KiB"
