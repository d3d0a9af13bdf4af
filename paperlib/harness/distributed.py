"""Several processes, one run: distributed data parallel under ``torchrun`` (issue 9).

``torchrun --nproc_per_node=N -m paperlib.harness.run key=value ...`` starts N processes; :func:`setup` joins them into
one process group (NCCL on CUDA, ``LOCAL_RANK`` picking the GPU; gloo on the CPU), and the runner trains as one process
would:

Sharding
    ``batch_size`` stays the *global* batch, so records compare across process counts: every process draws the same
    permutation and takes its slice of each global batch (:meth:`paperlib.harness.data._EpochLoader.shard`); the
    loaders' positions are the same everywhere, so a checkpoint resumes every process exactly.
Gradients
    :class:`~torch.nn.parallel.DistributedDataParallel` combines the gradients of weights *and* gates, weighted by each
    process's share of the global batch (:func:`weighted_allreduce`): the gradient of the global batch's mean loss.
    Clamping, masks and the dual step then run on identical parameters, so the multipliers stay identical
    (:func:`assert_identical` checks after every epoch).
Gate noise
    Every process seeds the global RNG alike and draws the same numbers in the same order, so all draw the *same* gate
    sample: two processes with half the batch each reproduce one process to float rounding (tests/test_distributed.py).
    The authors' DDP did the same (``core_exp.py`` seeds every process alike; the noise is ``torch.rand`` on each GPU).
Batch norm
    As in the authors' code: batch statistics from each process's slice, running statistics rank 0's, broadcast at every
    forward. ``sync_batchnorm=True`` trains with :class:`torch.nn.SyncBatchNorm` (CUDA only); evaluation, checkpoints
    and counts see plain ``BatchNorm2d`` modules holding the same tensors.
Records and checkpoints
    Only rank 0 writes them. Every process loads the checkpoint and evaluates the whole validation set (keeping the RNG
    in step). ``history.csv``'s epoch means are over all processes' examples; ``steps.csv.xz``'s ``loss`` is rank 0's
    slice's. ``metrics.json`` gains ``distributed``.

A non-finite loss is detected per process; only when rank 0 raises is the record marked failed (else it stays partial).
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
    """Join the process group ``torchrun`` describes (``WORLD_SIZE > 1``): NCCL with one GPU per process on CUDA, gloo
    on the CPU."""
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
    """Raise on every process unless ``tensor`` is bit-identical to rank 0's (all raise together: none is left waiting
    in a collective)."""
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
    """DDP communication hook: the sum over processes of ``loader.share`` (this process's fraction of the global batch)
    x the local gradient, the global batch's mean-loss gradient even when the last batch splits unevenly."""
    buffer = bucket.buffer().mul_(loader.share)
    future = dist.all_reduce(buffer, async_op=True).get_future()
    return future.then(lambda done: done.value()[0])


def wrap(model: nn.Module, loader, device: torch.device) -> nn.Module:
    """``model`` in :class:`~torch.nn.parallel.DistributedDataParallel`, gradients weighted by ``loader.share``; rank
    0's buffers (batch-norm statistics) are broadcast at every forward, as in the authors' runs."""
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

