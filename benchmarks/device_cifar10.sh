#!/bin/bash
# One call on a lent GPU machine (the device tool; README, "On a machine without Jupyter"): the GPU step
# timings of paperlib.harness.benchmark, eager and compiled gate pass, then CIFAR-10 runs of the CPU protocol
# from a commands file, several sharing the GPU (benchmarks/device_queue.py), until a deadline.
#   bash benchmarks/device_cifar10.sh DATA.tar.xz COMMANDS.txt SECONDS GIT_COMMIT [BENCHMARK_SECONDS]
# BENCH_MODELS (default: lenet5 resnet18 wrn-28-10) are the benchmark's models.
# DATA.tar.xz holds cifar10-jpeg/ (the shared JPEG tree, packed here with `tar -cJf`); SECONDS is the
# whole script's budget; GIT_COMMIT the commit of the tree that travelled. Complete records come back
# in $OUT/records.tar.gz (copy them into runs/ and run the same sweep here to add their notebooks),
# the benchmark's and every run's output in $OUT/logs.tar.gz.
set -u
start=$(date +%s)
data=$1 commands=$2 budget=$3 bench=${5:-45}  # 0: no benchmark
left() { echo $(( budget - ($(date +%s) - start) )); }
export PYTHONUNBUFFERED=1 PAPERLIB_DATA=/tmp/data PAPERLIB_RUNS=/tmp/runs PAPERLIB_CHECKPOINTS=/tmp/checkpoints
export PAPERLIB_GIT_COMMIT=$4
export TORCHINDUCTOR_COMPILE_THREADS=1  # 16 runs compile at once: no pool of compile workers each
logs=/tmp/logs; mkdir -p $PAPERLIB_DATA $PAPERLIB_RUNS $logs
tar -xJf "$data" -C $PAPERLIB_DATA
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
  # decode the JPEGs once (the runs read the cache) and print the pixels' hashes, to compare with the CPU's
  python3 -c "
import hashlib
from paperlib.harness.data import load_dataset
pair = load_dataset('cifar10')
for name, split in (('train', pair.train), ('test', pair.val)):
    print(name, 'pixels sha256', hashlib.sha256(split.images.numpy().tobytes()).hexdigest()[:16])
"
} 2>&1 | tee $logs/setup.log
# the step timings first, on an idle GPU (bounded, so that the runs keep their time)
for gates in never always; do
  [ "$bench" -gt 0 ] || break
  timeout $bench python3 -m paperlib.harness.benchmark --models ${BENCH_MODELS:-lenet5 resnet18 wrn-28-10} --device cuda --repeats 3 --steps 10 \
    --compile-gates $gates 2>&1 | tee -a $logs/benchmark.log
done
# several processes' small kernels can run side by side under MPS; without it the GPU time-slices them
if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then
  if timeout 30 python3 -c "import torch; print('MPS check', torch.ones(4, device='cuda').sum().item())"; then
    echo "MPS on" | tee -a $logs/setup.log
  else
    echo quit | nvidia-cuda-mps-control; echo "MPS off (its check failed)" | tee -a $logs/setup.log
  fi
fi
python3 benchmarks/device_queue.py "$commands" --epochs 20 --workers 16 --startup 60 \
  --seconds $(( $(left) - 25 )) --logs $logs 2>&1 | tee $logs/queue.log
nvidia-smi 2>&1 | tee -a $logs/setup.log
python3 - <<'PY'
import json, tarfile
from pathlib import Path
runs = Path("/tmp/runs")
with tarfile.open(Path(__import__("os").environ["OUT"]) / "records.tar.gz", "w:gz") as tar:
    for metrics in sorted(runs.glob("*/*/metrics.json")):
        status = json.loads(metrics.read_text()).get("status")
        print(status, metrics.parent.relative_to(runs))
        if status == "complete":
            tar.add(metrics.parent, arcname=str(metrics.parent.relative_to(runs)))
PY
tar -czf $OUT/logs.tar.gz -C /tmp logs
echo "script took $(( $(date +%s) - start )) s"
