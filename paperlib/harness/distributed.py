"""Several processes, one run: distributed data parallel under ``torchrun`` (issue 9).

``torchrun --nproc_per_node=N -m paperlib.harness.run key=value ...`` starts N processes; :func:`setup` (called by
:mod:`paperlib.harness.run`) joins them into one process group (NCCL on CUDA, where ``LOCAL_RANK`` picks the GPU; gloo
on the CPU). The runner (:mod:`paperlib.harness.training`) then trains as one process would, with these semantics:

Sharding
    ``batch_size`` stays the *global* batch, so records are comparable across process counts. Every process draws the
    same seeded permutation of an epoch; process ``r`` takes its contiguous slice of each global batch
    (:meth:`paperlib.harness.data._EpochLoader.shard`). The loaders' positions are the same everywhere, so a checkpoint
    resumes every process exactly.
Gradients
    The model's forward and backward run in :class:`~torch.nn.parallel.DistributedDataParallel`: the gradients of every
    parameter, weights *and* gates' ``log_alpha``, are combined across processes before the optimisers step, weighted by
    each process's share of the global batch (:func:`weighted_allreduce`; the plain average when the shares are equal).
    The result is the gradient of the global batch's mean loss, as in one process. Clamping of ``log_alpha``, pruning
    masks and the dual step then run on every process on identical parameters, and the constraint's density is a
    deterministic function of ``log_alpha``: the multipliers stay identical, which :func:`assert_identical` checks after
    every epoch.
Gate noise
    Every process seeds the global RNG with the run's seed and draws the same numbers in the same order (the loaders
    have their own generators, and every process evaluates), so every process draws the *same* gate sample for the
    global minibatch: the one-process semantics. Two processes with half the batch each reproduce one process with the
    full batch to float rounding (tests/test_distributed.py). The authors' DDP had the same semantics: ``core_exp.py``
    seeds every process alike (``change_random_seed(args.seed)``, no rank offset; ``utils/basic_utils.py`` seeds torch
    and every CUDA device), and the gate noise is ``torch.rand`` on each process's GPU (``sparse/l0_layers.py``), drawn
    only in training mode, so every GPU's generator gave the same sample at every step. (Only rank 0 validated, which
    moved its *CPU* generator through the ``DataLoader``'s base seed: that changed its data workers' seeds, not the gate
    noise.)
Batch norm
    As in the authors' code (plain ``DistributedDataParallel``, default ``broadcast_buffers=True``, no
    ``SyncBatchNorm``): batch statistics come from each process's own slice of the batch, and the running statistics are
    rank 0's, broadcast to the others at every forward. ``sync_batchnorm=True`` converts the batch norms to
    :class:`torch.nn.SyncBatchNorm` for training (statistics of the global batch; CUDA only, as torch's SyncBatchNorm);
    evaluation, checkpoints and the counts see plain ``BatchNorm2d`` modules holding the same tensors.
Records and checkpoints
    Only rank 0 writes them; the others wait at a barrier. Every process loads the checkpoint on resumption (one node,
    one file system), also with another number of processes. Every process evaluates the whole validation set (same
    numbers; it keeps the global RNG in step). The epoch means of ``history.csv`` are over all processes' examples; the
    per-step ``loss`` of ``steps.csv.xz`` is rank 0's slice's (densities and multipliers there are global).
    ``metrics.json`` gains ``distributed`` (absent for one process).

Limitation: a non-finite loss is detected per process; the process that raises ends the run (``torchrun`` stops the
others), and only when that is rank 0 is the record marked failed (otherwise it stays partial).
"""

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn


@dataclass(frozen=True)
class Context:
    """Where this process stands: its rank among ``world_size`` and its GPU index on the node."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def current() -> Context:
    """The process group this process belongs to, or one process alone."""
    if not (dist.is_available() and dist.is_initialized()):
        return Context()
    return Context(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), dist.get_backend())


def setup(device: torch.device) -> Context:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE > 1``); one process: nothing to do.

    Runs on ``device``'s type: CUDA with NCCL, one GPU per process of a node (``LOCAL_RANK``); the CPU with gloo.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return current()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device.type == "cuda":
        gpus = torch.cuda.device_count()
        if local_rank >= gpus:
            raise RuntimeError(f"process LOCAL_RANK={local_rank} has no GPU of its own: this node has {gpus}; "
                               f"start at most {gpus} processes per node, or train on the CPU with device=cpu")
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))  # barriers on this GPU
    else:
        dist.init_process_group("gloo")
    return current()


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if current().active:
        dist.barrier()


def assert_identical(name: str, tensor: torch.Tensor) -> None:
    """Raise on every process unless ``tensor`` is bit-identical on every process.

    Rank 0's value is broadcast and compared exactly; the verdict is reduced so that all processes raise together (none
    is left waiting in a collective).
    """
    context = current()
    if not context.active:
        return
    local = tensor.detach()
    reference = local.clone()
    dist.broadcast(reference, src=0)
    differs = torch.tensor([0.0 if torch.equal(local, reference) else 1.0], device=local.device)
    dist.all_reduce(differs, op=dist.ReduceOp.MAX)
    if differs.item():
        raise RuntimeError(f"{name} differ across processes (rank {context.rank}: {local.tolist()}, rank 0: "
                           f"{reference.tolist()}); the processes no longer train one model")


def weighted_allreduce(loader, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: sum over processes of ``share`` x the local gradient.

    ``loader.share`` is this process's fraction of the current global batch
    (:meth:`paperlib.harness.data._EpochLoader.shard`), so the sum is the gradient of the global batch's mean loss even
    when the last batch does not split evenly. Terms that do not depend on the data (the expected L2 norm, the
    constraint) have the same gradient everywhere and the shares sum to one.
    """
    buffer = bucket.buffer().mul_(loader.share)
    future = dist.all_reduce(buffer, async_op=True).get_future()
    return future.then(lambda done: done.value()[0])


def wrap(model: nn.Module, loader, device: torch.device) -> nn.Module:
    """``model`` in :class:`~torch.nn.parallel.DistributedDataParallel`, gradients weighted by ``loader.share``.

    Construction broadcasts rank 0's parameters and buffers (identical anyway: every process builds the model from the
    same seed or checkpoint); the default buffer synchronisation then broadcasts rank 0's buffers (batch-norm running
    statistics) at every forward, as in the authors' runs.
    """
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    ddp.register_comm_hook(loader, weighted_allreduce)
    return ddp


def to_sync_batchnorm(model: nn.Module) -> None:
    """Replace, in place, every batch norm below ``model`` by a ``SyncBatchNorm`` holding the same tensors."""
    for name, child in model.named_children():
        converted = nn.SyncBatchNorm.convert_sync_batchnorm(child)
        if converted is not child:
            setattr(model, name, converted)


def from_sync_batchnorm(model: nn.Module) -> None:
    """Undo :func:`to_sync_batchnorm`: plain ``BatchNorm2d`` modules holding the same parameters and buffers."""
    for name, child in model.named_children():
        if isinstance(child, nn.SyncBatchNorm):
            plain = nn.BatchNorm2d(child.num_features, child.eps, child.momentum, child.affine,
                                   child.track_running_stats, device=child.weight.device if child.affine else None)
            if child.affine:
                plain.weight, plain.bias = child.weight, child.bias
            if child.track_running_stats:
                plain.running_mean, plain.running_var = child.running_mean, child.running_var
                plain.num_batches_tracked = child.num_batches_tracked
            plain.train(child.training)
            setattr(model, name, plain)
        else:
            from_sync_batchnorm(child)


def reduce_means(means: dict, count: int, device: torch.device) -> dict:
    """Means over all processes' examples from each process's ``means`` over its ``count`` examples."""
    if not current().active:
        return means
    keys = sorted(means)
    totals = torch.tensor([float(means[k]) * count for k in keys] + [count], dtype=torch.float64, device=device)
    dist.all_reduce(totals)
    return {**means, **{k: (totals[i] / totals[-1]).item() for i, k in enumerate(keys)}}

