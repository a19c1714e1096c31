#!/usr/bin/env bash
# Why push_to_healthy does not poll a `recreate` app's fixed port during the deploy: with the
# docker CLI alone, a client that keeps connecting to the port while the old container is
# stopped and the new one started makes the new one unreachable for most of a second.
#
# Usage: bash bench/recreate_traffic.sh [ROUNDS]
# Prints, per round, how long after `docker start` returned the new container first answered,
# without and then with a client polling the port (every 10 ms, 100 ms timeout) meanwhile.
# Likely cause: docker-proxy accepts the client's connection as soon as it listens and dials
# the container before its interface is up; the unanswered ARP for the container's address
# is retried only after the kernel's 1 s retransmit time.
set -euo pipefail
rounds=${1:-3}
dir=$(mktemp -d)
net=pier-bench-traffic
trap 'rm -rf "$dir"; docker rm -f $(docker ps -aq --filter label=pier.bench=recreate-traffic) >/dev/null 2>&1 || true; docker network rm $net >/dev/null 2>&1 || true' EXIT
# A user-defined bridge, as Pier gives each app: on it the effect is reliable; on the default
# bridge it shows only sometimes.
docker network create "$net" >/dev/null
mkdir -p "$dir/bin" "$dir/www"
cp /bin/busybox "$dir/bin/busybox"
echo ok >"$dir/www/health"
image=$(tar -C "$dir" -c bin www | docker import \
    --change 'CMD ["/bin/busybox","httpd","-f","-p","8080","-h","/www"]' - pier-bench-traffic:latest)
port=$((29000 + RANDOM % 1000))
url="http://127.0.0.1:$port/health"
ms() { echo $((($2 - $1) / 1000000)); }

run() { # $1: "quiet" or "traffic"
    local old new s a e poller=
    old=$(docker run -d --network "$net" --label pier.bench=recreate-traffic -p "127.0.0.1:$port:8080" "$image")
    sleep 1
    if [[ $1 == traffic ]]; then
        (while true; do curl -s --max-time 0.1 -o /dev/null "$url" || true; sleep 0.01; done) &
        poller=$!
    fi
    for i in $(seq "$rounds"); do
        new=$(docker create --network "$net" --label pier.bench=recreate-traffic -p "127.0.0.1:$port:8080" "$image")
        docker stop "$old" >/dev/null
        s=$(date +%s%N)
        docker start "$new" >/dev/null
        a=$(date +%s%N)
        until curl -s --max-time 0.1 -o /dev/null -w '%{http_code}' "$url" | grep -q 200; do
            sleep 0.01
        done
        e=$(date +%s%N)
        echo "$1 round $i: docker start $(ms "$s" "$a") ms, first answer $(ms "$a" "$e") ms after it"
        docker rm -f "$old" >/dev/null
        old=$new
    done
    [[ -n $poller ]] && kill "$poller"
    docker rm -f "$old" >/dev/null
}
run quiet
run traffic
