"""Run a list of training commands on a lent GPU machine, several at a time, until a deadline.

    python -m paperlib.harness.sweeps grids/cifar10_control.yaml --commands > commands.txt   # here
    python3 benchmarks/device_queue.py commands.txt --epochs 20 --workers 14 --seconds 400   # there

A lent GPU machine is held for minutes, and one WideResNet-16-1 run at the CPU
protocol leaves an H100 mostly idle (its kernels are small), so several runs share
the GPU, one process each. Runs start in the file's order (``python -m
paperlib.harness.sweeps --commands`` prints them in the grids' order: put the runs that
matter most first), at most ``--workers`` at a time. Runs sharing a GPU progress
together, so too many of them would all be cut at the deadline: every few seconds
the queue reads each run's progress from its log (the runner's per-epoch line and
its progress bar), takes the best summed pace over 40 s as the GPU's throughput
(``tests/test_device_queue.py``), and keeps only as
many runs, the first in the file's order, as that throughput finishes before the
deadline; the others are stopped, and a queued run starts only if it too would
finish. At the deadline the runs still going are stopped; their records stay
partial, and a later sweep here trains them. Each run's output goes to
``<logs>/<n>.log``. Standard library only: the lent machine has no papermill and
nothing can be installed there.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

EPOCH_LINE = re.compile(r"\bepoch=(\d+) ")
PROGRESS_BAR = re.compile(r"epoch (\d+):\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)")


def progress(log: Path, epochs: int) -> float:
    """Fraction of the run done, from the runner's output: epochs ended, plus the current epoch's bar."""
    text = log.read_text(errors="replace")
    done = max((int(m) for m in EPOCH_LINE.findall(text)), default=0)
    bars = PROGRESS_BAR.findall(text)
    if bars:
        epoch, step, steps = (int(x) for x in bars[-1])
        if epoch == done + 1:
            return min(1.0, (done + step / steps) / epochs)
    return min(1.0, done / epochs)


def stop(process: subprocess.Popen) -> None:
    """Stop a run and everything it started (it leads its own process group)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
            process.wait(wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def runs_that_finish(fractions: list[float], throughput: float, seconds_left: float,
                     fastest: float = float("inf")) -> int:
    """How many of the runs (in priority order, with these fractions done) end in time if they share
    ``throughput`` (runs' worth of progress per second, split evenly among the runs kept), none of them
    faster than ``fastest``, the highest pace one run has been seen to keep (a run alone is held back by
    its own process, not by the GPU)."""
    for kept in range(len(fractions), 0, -1):
        if max(1.0 - f for f in fractions[:kept]) / min(throughput / kept, fastest) <= seconds_left:
            return kept
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commands", help="file with one shell command per line (blank lines and # comments skipped)")
    parser.add_argument("--epochs", type=int, required=True, help="epochs each run trains (to read its progress)")
    parser.add_argument("--workers", type=int, default=8, help="runs at a time")
    parser.add_argument("--seconds", type=float, required=True, help="stop every run this many seconds from now")
    parser.add_argument("--startup", type=float, default=60.0, help="seconds a run takes before its first step")
    parser.add_argument("--logs", default="device-logs", help="folder for each run's output")
    args = parser.parse_args()

    lines = [line.strip() for line in Path(args.commands).read_text().splitlines()]
    queue = [(n, line) for n, line in enumerate((l for l in lines if l and not l.startswith("#")), 1)]
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    deadline = start + args.seconds
    running: dict[int, tuple[subprocess.Popen, float, str]] = {}
    seen: dict[int, list[tuple[float, float]]] = {}  # run -> (time, fraction done) readings
    best = 0.0  # the highest summed pace measured so far: the GPU's throughput
    fastest = 0.0  # the highest pace of one run measured so far
    ended = 0

    def say(text: str) -> None:
        print(f"[{time.monotonic() - start:6.0f} s] {text}", flush=True)

    while queue or running:
        now = time.monotonic()
        for n, (process, began, line) in list(running.items()):
            if process.poll() is not None:
                del running[n]
                ended += process.returncode == 0
                say(f"run {n} ended rc={process.returncode} after {now - began:.0f} s")
        if now >= deadline:
            for n, (process, began, line) in running.items():
                say(f"run {n} stopped at the deadline after {now - began:.0f} s, {progress(logs / f'{n}.log', args.epochs):.0%} done")
                stop(process)
            for n, line in queue:
                say(f"run {n} not started: {line}")
            break
        # the GPU's throughput: the runs' summed pace over the last 40 s, at its best so far (a stopped run
        # leaves the GPU to the others, so the sum over fewer runs would underestimate it)
        order = sorted(running)
        fractions = {n: progress(logs / f"{n}.log", args.epochs) for n in order}
        paces = {}
        for n in order:
            readings = seen.setdefault(n, [])
            if fractions[n] > 0:
                readings.append((now, fractions[n]))
            recent = [r for r in readings if now - r[0] <= 40]
            if recent and now - recent[0][0] >= 15:
                paces[n] = (fractions[n] - recent[0][1]) / (now - recent[0][0])
        paced = bool(order) and len(paces) == len(order)
        if paced:
            best = max(best, sum(paces.values()))
            fastest = max(fastest, *paces.values())
        if paced and best > 0:
            # stopping runs speeds the others up only if the GPU is what holds them back: assume so here
            # (stop as few as possible), and never stop the first
            kept = max(1, runs_that_finish([fractions[n] for n in order], best, deadline - now - 15))
            for n in order[kept:]:
                say(f"run {n} stopped ({fractions[n]:.0%} done): the {len(order)} runs would not all end in time")
                stop(running.pop(n)[0])
            order = order[:kept]
        while queue and len(running) < args.workers:
            if best > 0:
                would = [fractions.get(n, 0.0) for n in order] + [0.0]
                # a queued run starts only if it ends in time even if it goes no faster than one run has gone
                if runs_that_finish(would, best, deadline - now - args.startup - 15, fastest) < len(would):
                    break
            n, line = queue.pop(0)
            with open(logs / f"{n}.log", "w") as log:
                process = subprocess.Popen(line, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
            running[n] = (process, now, line)
            order.append(n)
            say(f"run {n} started: {line}")
        if queue and not running:
            for n, line in queue:
                say(f"run {n} not started (less time left than a run takes): {line}")
            break
        time.sleep(3)
    say(f"done: {ended} run(s) ended with rc 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
