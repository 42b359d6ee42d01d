"""Children forked from a busy gRPC process: how many die before they run, with and without gRPC's fork handlers.

    python benchmarks/grpc_fork.py [--children 100]

A gRPC server with client threads calling it (as a Ray Client server is while clients connect),
then `subprocess.Popen(..., preexec_fn=...)` children one after another (Ray starts its processes
this way; a preexec_fn makes Python fork). grpcio 1.81-1.85 restarts its poller in the child and the
child dies when Python closes its descriptors (grpc/grpc#43055). Prints the failures for the default
and for GRPC_ENABLE_FORK_SUPPORT=false, which nas_stab sets for the Ray processes it starts
(nas_stab/search/ray/loopback.py, runners/local_cluster.sh, runners/slurm_ray.sbatch).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time


def child_failures(n: int) -> int:
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(4))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stop = threading.Event()

    def chatter() -> None:  # keep gRPC's poller busy
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        call = ch.unary_unary("/nas_stab.Probe/Call")
        while not stop.is_set():
            try:
                grpc.channel_ready_future(ch).result(timeout=0.2)
                call(b"", timeout=0.05)
            except (grpc.RpcError, grpc.FutureTimeoutError):
                pass

    threads = [threading.Thread(target=chatter, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    dead = 0
    for _ in range(n):
        p = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=lambda: None, stderr=subprocess.PIPE)
        dead += p.wait() != 0
        p.stderr.close()
    stop.set()
    server.stop(0)
    return dead


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--children", type=int, default=100)
    ap.add_argument("--child-run", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_run:
        print(child_failures(args.children))
        return
    import grpc

    print(f"grpcio {grpc.__version__}, {args.children} children each")
    for label, value in (("gRPC's default", None), ("GRPC_ENABLE_FORK_SUPPORT=false", "false")):
        env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
        if value is not None:
            env["GRPC_ENABLE_FORK_SUPPORT"] = value
        env["GRPC_VERBOSITY"] = "NONE"
        out = subprocess.run([sys.executable, __file__, "--child-run", "--children", str(args.children)],
                             env=env, capture_output=True, text=True, check=True).stdout.split()[-1]
        print(f"  {label:32s} {int(out):4d} of {args.children} children died before running")


if __name__ == "__main__":
    main()
