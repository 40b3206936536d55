#!/usr/bin/env python3
"""Independent timing of an NCCL all-reduce, to check the bus bandwidth `fabric-preflight collective
--workload torch` reports. Same collective, same sizes, but timed on the GPU's stream with CUDA events
(the workload times on the host clock around a synchronize), in processes of its own. Prints one JSON line.

  python3 bench/collective_timing.py --nproc 2 --distinct-hosts --bytes 256M --iters 20
"""

import argparse
import datetime
import json
import os


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def worker(rank, args, results):
    import torch
    import torch.distributed as dist

    if args.distinct_hosts:
        os.environ["NCCL_HOSTID"] = "bench-rank%d" % rank
    torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else rank)
    dist.init_process_group(
        "nccl",
        init_method="tcp://127.0.0.1:%d" % args.port,
        rank=rank,
        world_size=args.nproc,
        timeout=datetime.timedelta(seconds=600),
    )
    buf = torch.zeros(args.bytes // 4, dtype=torch.float32, device="cuda")
    for _ in range(5):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.iters):
        dist.all_reduce(buf)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / args.iters
    slowest = torch.tensor([seconds], dtype=torch.float64, device="cuda")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        s = slowest.item()
        algbw = args.bytes / s / 1e9
        results["line"] = json.dumps(
            {
                "bytes": args.bytes,
                "iters": args.iters,
                "nranks": args.nproc,
                "time_us": round(s * 1e6, 1),
                "algbw_gbytes_per_sec": round(algbw, 3),
                "busbw_gbytes_per_sec": round(algbw * 2 * (args.nproc - 1) / args.nproc, 3),
                "timer": "cuda events",
            }
        )
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--bytes", type=size, default=size("256M"))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--distinct-hosts", action="store_true")
    p.add_argument("--port", type=int, default=29611)
    args = p.parse_args()
    import torch.multiprocessing as mp

    results = mp.Manager().dict()
    mp.spawn(worker, args=(args, results), nprocs=args.nproc, join=True)
    print(results["line"])


if __name__ == "__main__":
    main()
