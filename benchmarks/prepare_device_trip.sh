#!/bin/bash
# Prepare, here, the one device call of a lent GPU (README, "On a machine without Jupyter"), for the
# CIFAR-10 protocols of issue 37: the carried data, the commands of every run still to make, in the order
# that answers questions first (issue 52's one-change granularity test, free gates of the GPU candidates, the
# device check, then the GPU control table), and a check that the tree plus the archive fit what a call carries.
#   bash benchmarks/prepare_device_trip.sh [GRID ...]
# then, with the device tool (carry [".devcarry"], timeout_s 600):
#   bash benchmarks/device_cifar10.sh .devcarry/cifar10-jpeg.tar.xz .devcarry/commands.txt 540 COMMIT 0
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
grids=("$@")
[ ${#grids[@]} -gt 0 ] || grids=(grids/cifar10_gpu_granularity.yaml grids/cifar10_gpu_free_gates.yaml
                                 grids/cifar10_device_check.yaml grids/cifar10_gpu_control.yaml)
exclude=$(git rev-parse --git-path info/exclude)  # .git/info/exclude, also from a worktree (where .git is a file)
mkdir -p "$(dirname "$exclude")"; grep -qsx '/.devcarry/' "$exclude" || echo /.devcarry/ >> "$exclude"
mkdir -p .devcarry
data=${PAPERLIB_DATA:-../shared/data}
[ -s .devcarry/cifar10-jpeg.tar.xz ] || tar -cJf .devcarry/cifar10-jpeg.tar.xz -C "$data" cifar10-jpeg
PAPERLIB_DATA=$data python -m paperlib.harness.sweeps "${grids[@]}" --commands | sed 's/^python /python3 /' \
  > .devcarry/commands.txt
# every tracked file's size, summed (xargs may split the list, so du's last total is not the whole tree's)
tracked=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
carried=$(du -cb .devcarry | tail -1 | cut -f1)
mib() { echo $(( $1 / 1048576 )); }
echo "$(wc -l < .devcarry/commands.txt) commands; tracked files $(mib $tracked) MiB + carried $(mib $carried) MiB"
if [ $(( tracked + carried )) -gt $(( 63 * 1048576 )) ]; then
  echo "the tree and the archive exceed 63 MiB: a call carries at most 64 MiB" >&2; exit 1
elif [ $(( tracked + carried )) -gt $(( 56 * 1048576 )) ]; then
  echo "warning: the tree and the archive exceed the 56 MiB the project keeps them under" >&2
fi
echo "commit to name in the call: $(git rev-parse HEAD) (commit everything first)"
