"""benchmarks/device_queue.py: how far a run is from its output, and how many runs sharing a GPU end in time."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "device_queue.py"
spec = importlib.util.spec_from_file_location("device_queue", SCRIPT)
device_queue = importlib.util.module_from_spec(spec)
spec.loader.exec_module(device_queue)


def test_progress_reads_ended_epochs_and_the_current_bar(tmp_path):
    log = tmp_path / "1.log"
    log.write_text("preset=cpu device=cuda\nepoch=0 val_error=90 l0_density=0.92 params_pct=100\n")
    assert device_queue.progress(log, 20) == 0
    # tqdm writes its bar with carriage returns; the runner's epoch line follows the cleared bar on that line
    log.write_text(log.read_text() + "epoch 1:  50%|#####     | 195/391 [00:05<00:05, 39.0it/s]\r"
                   "                    \repoch=1 train_loss=1.7 val_error=40 (about 2 min left)\n"
                   "epoch 2:  25%|##        | 98/391 [00:02<00:07, 39.0it/s]")
    assert device_queue.progress(log, 20) == pytest.approx((1 + 98 / 391) / 20)
    log.write_text(log.read_text() + "\repoch=2 train_loss=1.5\n")  # a bar of an ended epoch is not counted twice
    assert device_queue.progress(log, 20) == pytest.approx(2 / 20)


def test_runs_that_finish_keeps_the_first_runs_the_throughput_ends_in_time():
    # a GPU that does one run's worth of work every 100 s, shared evenly by the runs kept
    assert device_queue.runs_that_finish([0.5, 0.5, 0.5], 1 / 100, 100) == 2  # 2 runs: 0.5 * 2 * 100 s
    assert device_queue.runs_that_finish([0.5, 0.5, 0.5], 1 / 100, 150) == 3
    assert device_queue.runs_that_finish([0.0, 0.9, 0.9], 1 / 100, 150) == 1  # the first run decides
    assert device_queue.runs_that_finish([0.0], 1 / 100, 50) == 0
    # a run alone goes no faster than one run was seen to go: here half the GPU's throughput
    assert device_queue.runs_that_finish([0.0], 1 / 100, 150, fastest=1 / 200) == 0
    assert device_queue.runs_that_finish([0.5], 1 / 100, 150, fastest=1 / 200) == 1


def test_the_queue_runs_its_commands_in_order_and_stops_what_outlasts_the_deadline(tmp_path):
    commands = tmp_path / "commands.txt"
    quick = f"{sys.executable} -c \"print('epoch=1 train_loss=1')\""
    commands.write_text(f"# a comment\n{quick}\n\n{sys.executable} -c \"import time; time.sleep(60)\"\n")
    result = subprocess.run([sys.executable, str(SCRIPT), str(commands), "--epochs", "1", "--workers", "2",
                             "--seconds", "6", "--logs", str(tmp_path / "logs")],
                            capture_output=True, text=True, timeout=60)
    assert "run 1 ended rc=0" in result.stdout
    assert "run 2 stopped at the deadline" in result.stdout
    assert result.stdout.rstrip().endswith("done: 1 run(s) ended with rc 0")
    assert (tmp_path / "logs" / "1.log").read_text().startswith("epoch=1")
