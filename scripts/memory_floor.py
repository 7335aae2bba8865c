#!/usr/bin/env python3
"""The least memory a run needs: the smallest cgroup memory limit under
which the 10M-key workload of incremental_bench.py completes, found by
bisection, for each configuration, in interleaved rounds.

    sudo python3 scripts/memory_floor.py [--only "1s incremental"] [--repeat 3]
        [--binary BUILD] [--binary-b OTHER_BUILD] [--resolution-mib 16]

Peak RSS (VmHWM) counts pages the process no longer needs: memory the
allocator returned with MADV_FREE stays resident until the kernel wants it
(mimalloc does this when one thread frees a large block another thread
allocated, as a checkpoint's upload does with the columns a task copied).
A limit makes the kernel take such pages back, and the page cache, before
it kills the run, so the least limit a run completes under is the memory
it needs. A probe that the kernel's OOM killer ends (SIGKILL) counts as
too little; a run that fails any other way stops the script. Needs root
and the cgroup memory controller (v1 or v2). Each probe is one run of
build-up plus --seconds at the rate (default 20).
"""
import argparse
import os
import shutil
import signal
import subprocess
import tempfile

from incremental_bench import chosen, command, rotated, runs_of, workload_arguments


class Cgroup:
    """A memory cgroup of its own, v1 or v2, whichever holds the controller."""

    def __init__(self, name):
        v1 = "/sys/fs/cgroup/memory"
        if os.path.isdir(v1):
            self.path, self.limit_file = os.path.join(v1, name), "memory.limit_in_bytes"
        elif "memory" in open("/sys/fs/cgroup/cgroup.controllers").read().split():
            self.path, self.limit_file = os.path.join("/sys/fs/cgroup", name), "memory.max"
            # A v2 child has memory.max only where its parent hands the
            # controller down.
            control = "/sys/fs/cgroup/cgroup.subtree_control"
            if "memory" not in open(control).read().split():
                try:
                    with open(control, "w") as f:
                        f.write("+memory")
                except OSError as e:
                    raise SystemExit(f"cannot enable the memory controller for child "
                                     f"cgroups ({control}: {e}): run as root on the host")
        else:
            raise SystemExit("no cgroup memory controller: mount it, or run where it is")
        os.makedirs(self.path, exist_ok=True)

    def run(self, command_line, limit_mib):
        """Runs `command_line` inside the cgroup under `limit_mib`; its
        wait status."""
        with open(os.path.join(self.path, self.limit_file), "w") as f:
            f.write(str(limit_mib << 20))
        procs = os.path.join(self.path, "cgroup.procs")

        def enter():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        child = subprocess.Popen(command_line, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, preexec_fn=enter)
        return child.wait()


def completes(cgroup, binary, args, config, work, limit_mib):
    command_line, _ = command(binary, args, config, work)
    status = cgroup.run(command_line, limit_mib)
    shutil.rmtree(work, ignore_errors=True)
    if status == 0:
        return True
    if status == -signal.SIGKILL:
        return False
    raise SystemExit(f"{' '.join(command_line)} failed ({status}) under {limit_mib} MiB")


def floor(cgroup, binary, args, config, work):
    """The least limit (MiB, to --resolution-mib) the run completes under."""
    low, high = args.low_mib, args.high_mib
    if not completes(cgroup, binary, args, config, work, high):
        raise SystemExit(f"the run does not complete under --high-mib {high}: raise it")
    while high - low > args.resolution_mib:
        middle = (low + high) // 2
        if completes(cgroup, binary, args, config, work, middle):
            high = middle
        else:
            low = middle
    return high


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload_arguments(p, seconds=20)
    p.add_argument("--only", default="1s incremental",
                   help="comma-separated configurations besides off")
    p.add_argument("--low-mib", type=int, default=768, help="a limit every run fails under")
    p.add_argument("--high-mib", type=int, default=1536, help="a limit every run completes under")
    p.add_argument("--resolution-mib", type=int, default=16)
    args = p.parse_args()
    runs = runs_of(chosen(args.only), args)
    names = list(runs)
    cgroup = Cgroup(f"tidewater-memory-floor-{os.getpid()}")
    scratch = tempfile.mkdtemp(prefix="memory-floor-")
    work = os.path.join(scratch, "run")
    floors = {n: [] for n in names}
    try:
        for r in range(args.repeat):
            for name in rotated(names, r):
                binary, flags = runs[name]
                mib = floor(cgroup, binary, args, flags, work)
                floors[name].append(mib)
                print(f"round {r + 1} {name}: completes under {mib} MiB", flush=True)
    finally:
        # Also when a run fails or is interrupted: its process has ended.
        os.rmdir(cgroup.path)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nleast limit a run completes under (MiB, to {args.resolution_mib}), per round")
    print("| configuration | per round | of off, per round |")
    print("|---|---|---|")
    for name in names:
        ratios = ", ".join(f"{m / o:.2f}x" for m, o in zip(floors[name], floors["off"]))
        print(f"| {name} | {', '.join(map(str, floors[name]))} | "
              f"{'–' if name == 'off' else ratios} |")


if __name__ == "__main__":
    main()
