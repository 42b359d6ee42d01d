#!/usr/bin/env bash
# A multi-node Ray cluster on one machine, on loopback (127.0.0.1) only: a head node and
# N worker nodes, each its own raylet started with `ray start`.
#
#   runners/local_cluster.sh [N_WORKERS] [CPUS_PER_NODE]     start (defaults: 1 worker, 1 CPU per node)
#   runners/local_cluster.sh stop DIR                        stop the cluster started with Ray temp dir DIR
#
# Prints the address to pass to `nas-stab run SPEC --runner ray --address 127.0.0.1:PORT` and the
# exact stop command. The cluster gets its own Ray temp dir, so `stop` ends only this cluster's
# processes (by id), never another Ray on the machine (it does not use `ray stop`).
#
# Environment: PYTHON (default: python3 of the active environment), RAY_PORT (default: a free port),
# HEAD_CPUS (default: CPUS_PER_NODE; set 0 to keep trials off the head node), CLIENT_PORT (the head's
# Ray Client server, for `--address ray://127.0.0.1:CLIENT_PORT`; default: a free port. With ray[client]
# installed, `ray start --head` always starts one, on 10001 unless told: two loopback clusters would share it).
#
# Ray 2.60 rewrites 127.0.0.1 to the machine's network address when a node joins; the nodes are
# started through `python -m nas_stab.search.ray.loopback`, which is the `ray` command line
# without that rewrite, so everything stays on loopback.
set -euo pipefail

PY=${PYTHON:-python3}

stop_cluster() {
    local dir=$1
    [ -d "$dir" ] || { echo "no such Ray temp dir: $dir" >&2; exit 2; }
    local pids="" kids="" p
    # the cluster's processes name their session dir on their command lines; their children (the
    # raylets' agents and workers) do not, so they are found by parent id
    for p in $(pgrep -f -- "$dir/session" || true); do
        [ "$p" != "$$" ] && pids="$pids $p"
    done
    # the Ray Client server names only the head's address on its command line
    if [ -f "$dir/gcs_port" ]; then
        for p in $(pgrep -f -- "ray.util.client.server --address=127.0.0.1:$(cat "$dir/gcs_port") " || true); do
            pids="$pids $p"
        done
    fi
    for p in $pids; do kids="$kids $(pgrep -P "$p" || true)"; done
    [ -n "${pids// /}" ] || { echo "no running processes for $dir"; rm -rf "$dir"; return 0; }
    kill $pids $kids 2>/dev/null || true
    for _ in $(seq 1 20); do
        alive=""
        for p in $pids $kids; do [ -e "/proc/$p" ] && ! grep -q ') Z' "/proc/$p/stat" 2>/dev/null && alive="$alive $p"; done
        [ -z "$alive" ] && break
        sleep 0.5
    done
    [ -n "${alive:-}" ] && kill -9 $alive 2>/dev/null || true
    rm -rf "$dir"
    echo "stopped the Ray cluster in $dir"
}

if [ "${1:-}" = "stop" ]; then
    stop_cluster "${2:?usage: $0 stop DIR}"
    exit 0
fi

# the environment first, in one line each, before anything starts
if ! "$PY" -c 'import nas_stab, ray' 2>/dev/null; then
    echo "$0: '$PY' cannot import nas_stab and ray: activate the environment nas_stab is installed in (source .venv/bin/activate) or set PYTHON=/path/to/.venv/bin/python" >&2
    exit 2
fi
case "${1:-1}" in ''|*[!0-9]*) echo "usage: $0 [N_WORKERS] [CPUS_PER_NODE] | $0 stop DIR (N_WORKERS must be a number, got '${1}')" >&2; exit 2;; esac
case "${2:-1}" in ''|*[!0-9]*) echo "usage: $0 [N_WORKERS] [CPUS_PER_NODE] | $0 stop DIR (CPUS_PER_NODE must be a number, got '${2}')" >&2; exit 2;; esac

N=${1:-1}
CPUS=${2:-1}
HEAD_CPUS=${HEAD_CPUS:-$CPUS}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=${RAY_PORT:-$(free_port)}
CLIENT_PORT=${CLIENT_PORT:-$(free_port)}
DIR=$(mktemp -d /tmp/nas-ray-XXXXXX)  # short: Ray's socket paths live under it
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-token}  # Ray 2.60's token auth; the token is ~/.ray/auth_token
# grpcio 1.81-1.85: a process Ray forks while gRPC is busy can die before it runs (grpc/grpc#43055),
# e.g. the Ray Client server's per-client driver; Ray's processes do not need gRPC's fork handlers
export GRPC_ENABLE_FORK_SUPPORT=${GRPC_ENABLE_FORK_SUPPORT:-false}
RAY=("$PY" -m nas_stab.search.ray.loopback)
if [ "${RAY_AUTH_MODE,,}" = "token" ] && [ -z "${RAY_AUTH_TOKEN:-}" ] && [ ! -s "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]; then
    # a fresh machine has no token yet, and `ray start` will not make one: make it (once, for every cluster here)
    "${RAY[@]}" get-auth-token --generate >"$DIR/auth.log" 2>&1 \
        || { cat "$DIR/auth.log" >&2; echo "could not create Ray's auth token (ray get-auth-token --generate)" >&2; rm -rf "$DIR"; exit 1; }
    echo "created Ray's auth token in ${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"
fi
COMMON=(--node-ip-address=127.0.0.1 --temp-dir="$DIR" --disable-usage-stats)
echo "$PORT" >"$DIR/gcs_port"

"${RAY[@]}" start --head --port="$PORT" --ray-client-server-port="$CLIENT_PORT" --num-cpus="$HEAD_CPUS" \
    --include-dashboard=false "${COMMON[@]}" >"$DIR/head.log" 2>&1 \
    || { cat "$DIR/head.log" >&2; stop_cluster "$DIR"; exit 1; }
for i in $(seq 1 "$N"); do
    "${RAY[@]}" start --address="127.0.0.1:$PORT" --num-cpus="$CPUS" "${COMMON[@]}" >"$DIR/worker-$i.log" 2>&1 \
        || { cat "$DIR/worker-$i.log" >&2; stop_cluster "$DIR"; exit 1; }
done

cat <<MSG
Ray cluster on loopback: head + $N worker node(s), $CPUS CPU(s) per worker, $HEAD_CPUS on the head
address: 127.0.0.1:$PORT

  export RAY_AUTH_MODE=token RAY_ADDRESS=127.0.0.1:$PORT   # then --address auto also finds it
  nas-stab run spaces/quickstart.yaml --runner ray --address 127.0.0.1:$PORT --set runner.concurrency=$(( N * CPUS + HEAD_CPUS ))
client address: ray://127.0.0.1:$CLIENT_PORT
  nas-stab run spaces/quickstart.yaml --runner ray --address ray://127.0.0.1:$CLIENT_PORT   # through Ray Client

stop it with:
  $0 stop $DIR
MSG
