#!/usr/bin/env python3
"""fabric-preflight's built-in NCCL workload: an all-reduce benchmark through PyTorch for sites without
nccl-tests. Kept in the binary and written next to the run's logs by `fabric-preflight collective --workload
torch`. It prints what nccl-tests' all_reduce_perf prints (header, result table, summary lines), so one parser
reads both; busbw is computed as nccl-tests does for all_reduce (algbw x 2(n-1)/n), and every element of a
checked all-reduce is compared with the exact sum.

With --split-mod G, ranks whose rank mod G match share a communicator (a rail each when G is the GPUs per
node, as nccl-tests' NCCL_TESTS_SPLIT="MOD G"); every communicator runs at once and gets a table of its own,
after a `# Group g : ranks …` line, since one table for all (nccl-tests' way) cannot say which rail was slow.

Ranks come from the launcher the environment shows: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR),
Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the first node of the step is the rendezvous unless
MASTER_ADDR is set), Open MPI (OMPI_COMM_WORLD_*; MASTER_ADDR required), else --nproc local processes.
"""

import argparse
import datetime
import os
import socket
import subprocess
import sys
import time

WARMUP = 5


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--min-bytes", type=size, default=size("8M"))
    p.add_argument("--max-bytes", type=size, default=size("1G"))
    p.add_argument("--factor", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--nproc", type=int, default=0, help="local processes when no launcher is seen (default: one per GPU)")
    p.add_argument(
        "--distinct-hosts",
        action="store_true",
        help="give each local process its own NCCL_HOSTID, so NCCL treats them as separate hosts and uses its network transport",
    )
    p.add_argument(
        "--split-mod",
        type=int,
        default=0,
        help="one communicator per rank mod G (one per rail when G is the GPUs per node), each with its own table",
    )
    p.add_argument("--port", type=int, default=int(os.environ.get("MASTER_PORT", "29500")))
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a collective may take before NCCL aborts")
    return p.parse_args()


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = str(text).strip().upper().rstrip("B")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def first_slurm_host():
    nodes = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST", "")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    # `gpu-[01-04,07]` or `gpu-01,gpu-02`: the first name.
    head = nodes.split(",")[0]
    if "[" in head:
        prefix, rest = head.split("[", 1)
        return prefix + rest.split("-")[0].split("]")[0]
    return head


def launcher():
    """(rank, world, local_rank, master_addr, name) from the environment, or None for local processes."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0")), env["MASTER_ADDR"], "torchrun"
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        master = env.get("MASTER_ADDR") or first_slurm_host()
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", "0")), master, "slurm"
    if "OMPI_COMM_WORLD_RANK" in env:
        if "MASTER_ADDR" not in env:
            sys.exit("workload: under Open MPI set MASTER_ADDR to rank 0's host (mpirun -x MASTER_ADDR=...)")
        return (
            int(env["OMPI_COMM_WORLD_RANK"]),
            int(env["OMPI_COMM_WORLD_SIZE"]),
            int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")),
            env["MASTER_ADDR"],
            "openmpi",
        )
    return None


def bus_of(torch, device):
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)
    return "0x%02x" % bus if isinstance(bus, int) else "0x??"


def fmt(value, width):
    """nccl-tests' getFloatStr: two decimals while they fit, fewer as the number grows."""
    power = len(str(int(value))) if value >= 1 else 0
    if power < width - 2:
        return "%*.2f" % (width, value)
    if power < width - 1:
        return "%*.1f" % (width, value)
    if power < width + 1:
        return "%*.0f" % (width, value)
    return "%*.1e" % (width, value)


def worker(rank, world, local_rank, master, args, how):
    import torch
    import torch.distributed as dist

    if args.distinct_hosts:
        os.environ["NCCL_HOSTID"] = "fabric-preflight-rank%d" % rank
    device = local_rank % max(torch.cuda.device_count(), 1)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl",
        init_method="tcp://%s:%d" % (master, args.port),
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=args.timeout),
        device_id=torch.device("cuda", device),
    )
    split = args.split_mod
    if split:
        # Every rank creates every group (torch requires it), then uses its own.
        groups = [dist.new_group(list(range(g, world, split))) for g in range(split)]
        comm, color = groups[rank % split], rank % split
        members = list(range(color, world, split))
    else:
        comm, color, members = None, 0, list(range(world))
    size = len(members)
    me = (rank, color, os.getpid(), socket.gethostname().split(".")[0], device, bus_of(torch, device), torch.cuda.get_device_name(device))
    everyone = [None] * world
    dist.all_gather_object(everyone, me)
    out = rank == 0

    def say(line):
        if out:
            print(line, flush=True)

    say("# Collective test starting: all_reduce_perf")
    nccl_version = torch.cuda.nccl.version()
    if isinstance(nccl_version, tuple):
        nccl_version = ".".join(map(str, nccl_version))
    say("# fabric-preflight torch workload: torch %s, NCCL %s, launcher %s" % (torch.__version__, nccl_version, how))
    say(
        "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(factor) warmup iters: %d iters: %d agg iters: 1 validation: 1 graph: 0"
        % (args.min_bytes, args.max_bytes, args.factor, WARMUP, args.iters)
    )
    say("#")
    say("# Using devices")
    for r, g, pid, host, dev, bus, name in everyone:
        say("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s" % (r, g, pid, host, dev, bus, name))
    say("#")
    say("#                                                              out-of-place                       in-place          ")
    say("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong")
    say("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ")

    total_wrong = 0
    busbws = []
    # Each communicator's rows, printed after the sweep as one table per group (split runs only).
    tables = {}
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = nbytes // 4
        buf = torch.zeros(count, dtype=torch.float32, device="cuda")
        for _ in range(WARMUP):
            dist.all_reduce(buf, group=comm)
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf, group=comm)
        torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / args.iters
        # nccl-tests reports the slowest rank's time (here: of each communicator).
        slowest = torch.tensor([elapsed], dtype=torch.float64, device="cuda")
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=comm)
        seconds = slowest.item()
        algbw = nbytes / seconds / 1e9
        busbw = algbw * 2 * (size - 1) / size
        # Check: every rank contributes rank+1, small integers whose float32 sum is exact.
        buf.fill_(float(rank + 1))
        dist.all_reduce(buf, group=comm)
        expected = sum(m + 1 for m in members)
        wrong = torch.tensor([int(torch.count_nonzero(buf != expected).item())], dtype=torch.int64, device="cuda")
        dist.all_reduce(wrong, group=comm)
        wrong = int(wrong.item())
        row = "%12d  %12d  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6d" % (
            nbytes, count, "float", "sum", "-1", "", "", "", "", fmt(seconds * 1e6, 7), fmt(algbw, 6), fmt(busbw, 6), wrong
        )
        if split:
            everyone_row = [None] * world
            dist.all_gather_object(everyone_row, (color, row, wrong, busbw) if rank == members[0] else None)
            for entry in everyone_row:
                if entry:
                    tables.setdefault(entry[0], []).append(entry[1])
                    total_wrong += entry[2]
                    busbws.append(entry[3])
        else:
            total_wrong += wrong
            busbws.append(busbw)
            say(row)
        del buf
        nbytes *= args.factor
    for g in sorted(tables):
        say("# Group %2d : ranks %s" % (g, ",".join(str(r) for r in range(g, world, split))))
        for row in tables[g]:
            say(row)
    say("# Out of bounds values : %d %s" % (total_wrong, "FAILED" if total_wrong else "OK"))
    say("# Avg bus bandwidth    : %g " % (sum(busbws) / max(len(busbws), 1)))
    say("#")
    dist.destroy_process_group()
    return 1 if total_wrong else 0


def local_main(rank, world, args, codes):
    codes[rank] = worker(rank, world, rank, "127.0.0.1", args, "local")


def main():
    args = parse_args()
    found = launcher()
    if found:
        rank, world, local_rank, master, how = found
        sys.exit(worker(rank, world, local_rank, master, args, how))
    import torch
    import torch.multiprocessing as mp

    world = args.nproc or max(torch.cuda.device_count(), 1)
    codes = mp.Manager().dict()
    mp.spawn(local_main, args=(world, args, codes), nprocs=world, join=True)
    sys.exit(max(codes.values(), default=1))


if __name__ == "__main__":
    main()
