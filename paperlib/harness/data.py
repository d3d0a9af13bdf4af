"""Datasets and fast loaders for the paper's experiments (App. J).

Everything is read from one data root (:func:`data_root`). MNIST, CIFAR-10, CIFAR-100 and TinyImageNet are held in
memory as ``uint8`` tensors ``(N, C, H, W)`` and served by :class:`TensorLoader`, which cuts batches by indexing and
augments whole batches at once: on a CPU far faster than a per-sample ``Dataset`` + ``DataLoader``. Image trees (JPEG)
are decoded once and cached to a ``.pt`` file (:func:`load_dataset`). ImageNet is too large for memory and uses a
``DataLoader`` over a ``torchvision`` ``ImageFolder``.

On-disk layouts under the data root::

    MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte   (torchvision layout)
    cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}
    cifar10-jpeg/{train,test}/<class>/*.jpg                  (JPEG ImageFolder)
    cifar-100-python/{train,test,meta}
    tiny-imagenet-200/train/<wnid>/images/*.JPEG
    tiny-imagenet-200/val/images/*.JPEG + val/val_annotations.txt
    imagenet/{train,val}/<wnid>/*.JPEG
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import pickle
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import v2

from .vocabulary import DATASETS

logger = logging.getLogger(__name__)

DATA_ENV_VAR = "PAPERLIB_DATA"
DEFAULT_DATA_ROOT = Path("~/.cache/paperlib/data")
CACHE_DIR_NAME = "paperlib-cache"
CACHE_FORMAT_VERSION = 1

# Normalisation statistics (per channel, on the [0, 1] scale): the usual MNIST and CIFAR values (also the authors');
# TinyImageNet is mapped to [-1, 1]; ImageNet uses torchvision's statistics.
MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)
CIFAR10_MEAN = (125.3 / 255, 123.0 / 255, 113.9 / 255)
CIFAR10_STD = (63.0 / 255, 62.1 / 255, 66.7 / 255)
CIFAR100_MEAN = (129.3 / 255, 124.1 / 255, 112.4 / 255)
CIFAR100_STD = (68.2 / 255, 65.4 / 255, 70.4 / 255)
TINYIMAGENET_MEAN, TINYIMAGENET_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR10_BATCHES = "cifar-10-batches-py"
CIFAR10_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta")
CIFAR10_JPEG = "cifar10-jpeg"
CIFAR100_DIR = "cifar-100-python"
CIFAR100_FILES = ("train", "test", "meta")
TINYIMAGENET_DIR = "tiny-imagenet-200"
IMAGENET_DIR = "imagenet"
JPEG_SUFFIXES = (".jpg", ".jpeg")


def data_root() -> Path:
    """``$PAPERLIB_DATA`` if set and non-empty (relative to the working directory: ``../shared/data`` from the
    repository root on the offline machines), else ``~/.cache/paperlib/data``."""
    value = os.environ.get(DATA_ENV_VAR)
    return Path(value).expanduser() if value else DEFAULT_DATA_ROOT.expanduser()


@dataclass(frozen=True)
class Augment:
    """Training augmentation of whole batches: pad by ``crop_padding`` zero pixels and crop back to size at random (0:
    off), then mirror left-right with probability 1/2 (``hflip``). App. J lists TinyImageNet's flip before its crop,
    which gives the same distribution (the crop offsets are symmetric)."""

    crop_padding: int = 0
    hflip: bool = False

    def __post_init__(self) -> None:
        if self.crop_padding < 0:
            raise ValueError(f"crop_padding must be >= 0, got {self.crop_padding}")


@dataclass(frozen=True)
class ImageTensors:
    """A split held in memory: ``images`` uint8 ``(N, C, H, W)``, ``labels`` int64 ``(N,)``."""

    images: Tensor
    labels: Tensor

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise ValueError(f"images must be uint8 (N, C, H, W), got {self.images.dtype} {tuple(self.images.shape)}")
        if self.labels.dtype != torch.int64 or self.labels.shape != (self.images.shape[0],):
            raise ValueError(f"labels must be int64 (N,), got {self.labels.dtype} {tuple(self.labels.shape)}")

    def __len__(self) -> int:
        return self.images.shape[0]

    def head(self, n: int | None) -> ImageTensors:
        """The first ``n`` examples (all of them if ``n`` is None)."""
        return self if n is None else ImageTensors(self.images[:n], self.labels[:n])


@dataclass(frozen=True)
class DatasetPair:
    """Train and validation splits of one dataset and what a run records of them: :class:`ImageTensors`, or
    ``ImageFolder`` datasets with their transforms for ImageNet (whose ``train_augment`` is None); ``source``, the
    on-disk format read; ``val_split``, the split the validation error is measured on; ``location``, the folder."""

    name: str
    train: ImageTensors | Dataset
    val: ImageTensors | Dataset
    num_classes: int
    input_shape: tuple[int, int, int]
    classes: tuple[str, ...]
    source: str
    val_split: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    train_augment: Augment | None
    location: Path

    def loader(self, split: str, batch_size: int, *, seed: int = 0, device: torch.device | str = "cpu",
               max_batches: int | None = None, num_workers: int = 2,
               memory_format: torch.memory_format = torch.contiguous_format, rank: int = 0,
               world_size: int = 1) -> TensorLoader | DeviceLoader:
        """A loader over ``split`` ("train": shuffled and augmented; "val": in order), batches in ``memory_format``;
        ``rank``/``world_size``: this process's slice of every global batch (:meth:`_EpochLoader.shard`);
        ``num_workers``: ImageNet only."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        data = self.train if split == "train" else self.val
        is_train = split == "train"
        if isinstance(data, ImageTensors):
            return TensorLoader(data.images, data.labels, batch_size, shuffle=is_train, seed=seed,
                                augment=self.train_augment if is_train else Augment(), mean=self.mean, std=self.std,
                                device=device, max_batches=max_batches, memory_format=memory_format, rank=rank,
                                world_size=world_size)
        return DeviceLoader(data, batch_size, shuffle=is_train, seed=seed, device=device, max_batches=max_batches,
                            num_workers=num_workers, memory_format=memory_format, rank=rank, world_size=world_size)

    @functools.cached_property
    def content_sha256(self) -> str:
        """SHA-256 of the data read, wherever it lies: of the splits' tensors as stored, or for ImageNet of every file's
        relative path and size, in reading order."""
        digest = hashlib.sha256()
        for split in (self.train, self.val):
            if isinstance(split, ImageTensors):
                digest.update(split.images.contiguous().numpy().tobytes())
                digest.update(split.labels.contiguous().numpy().tobytes())
            else:
                for path in _image_files(split):
                    digest.update(f"{Path(path).relative_to(self.location)} {os.path.getsize(path)}\n".encode())
        return digest.hexdigest()

    def describe(self) -> dict:
        """A JSON-serialisable, machine-independent summary for run records (no paths)."""
        return {"dataset": self.name, "source": self.source, "content_sha256": self.content_sha256,
                "num_train": len(self.train), "num_val": len(self.val), "val_split": self.val_split,
                "num_classes": self.num_classes, "input_shape": list(self.input_shape), "mean": list(self.mean),
                "std": list(self.std),
                "train_augment": None if self.train_augment is None else vars(self.train_augment).copy()}


def _image_files(split: Dataset) -> list[str]:
    """The image files of an ``ImageFolder`` split (or of a ``Subset`` of one), in reading order."""
    if isinstance(split, Subset):
        return [split.dataset.samples[i][0] for i in split.indices]
    return [path for path, _ in split.samples]


def random_crop(images: Tensor, offsets: Tensor, padding: int) -> Tensor:
    """Crop each image of ``(B, C, H, W)`` ``images`` to its size after zero padding by ``padding``, its top-left corner
    at its row of int64 ``(B, 2)`` ``offsets`` (in ``[0, 2 * padding]``): torchvision's ``RandomCrop(size, padding)``
    per sample, done for the whole batch with two gathers."""
    b, c, h, w = images.shape
    padded = F.pad(images, (padding, padding, padding, padding))
    rows = offsets[:, 0, None] + torch.arange(h, device=images.device)  # (B, H)
    cols = offsets[:, 1, None] + torch.arange(w, device=images.device)  # (B, W)
    out = padded.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * padding))
    return out.gather(3, cols[:, None, None, :].expand(b, c, h, w))


def hflip(images: Tensor, mask: Tensor) -> Tensor:
    """Mirror left-right the images of ``(B, C, H, W)`` ``images`` where the bool ``(B,)`` ``mask`` is True."""
    return torch.where(mask[:, None, None, None], images.flip(-1), images)


def normalize(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """uint8 images -> float32 ``(x / 255 - mean) / std`` per channel."""
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=images.device)[:, None, None]
    std_t = torch.as_tensor(std, dtype=torch.float32, device=images.device)[:, None, None]
    return (images.float() / 255 - mean_t) / std_t


def _epoch_seed(seed: int, epoch: int) -> int:
    """A well-mixed 63-bit seed for one epoch, derived from the run seed."""
    digest = hashlib.sha256(f"paperlib-loader/{seed}/{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class _EpochLoader:
    """Epoch and position bookkeeping shared by the loaders: an epoch's order comes from a generator seeded by ``(seed,
    epoch)``; the position advances *before* a batch is yielded, so a checkpoint taken while the consumer holds a batch
    resumes with the next one. ``batch_size`` is the *global* batch of all processes, each taking its slice
    (:meth:`shard`); ``share`` is this process's fraction of the current one (to weight unequal last batches). Batches
    go to ``device`` in ``memory_format``; ``shuffle``: a new order every epoch, else the data's."""

    def __init__(self, num_examples: int, batch_size: int, seed: int, max_batches: int | None, rank: int,
                 world_size: int, shuffle: bool, device: torch.device | str,
                 memory_format: torch.memory_format) -> None:
        if num_examples < 1:
            raise ValueError("a loader needs at least one example")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_batches is not None and max_batches < 1:
            raise ValueError(f"max_batches must be >= 1 or None, got {max_batches}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.num_examples, self.batch_size, self.seed, self.max_batches = num_examples, batch_size, seed, max_batches
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.device, self.memory_format = shuffle, torch.device(device), memory_format
        self.epoch = 0
        self._next_batch = 0
        self.share = 1.0
        if world_size > 1:
            smallest = num_examples % batch_size or batch_size  # the last global batch
            if smallest < world_size:
                raise ValueError(f"a global batch of {smallest} examples cannot be shared by {world_size} "
                                 f"processes (batch_size={batch_size}, {num_examples} examples)")

    def __len__(self) -> int:
        full = math.ceil(self.num_examples / self.batch_size)
        return full if self.max_batches is None else min(full, self.max_batches)

    def shard(self, batch: int) -> tuple[int, int]:
        """Positions ``[start, stop)`` in the epoch's order of this process's slice of global batch ``batch``: the batch
        (cut at the end of the data) in ``world_size`` contiguous slices whose sizes differ by at most one."""
        low = batch * self.batch_size
        size = min(self.batch_size, self.num_examples - low)
        start = low + size * self.rank // self.world_size
        stop = low + size * (self.rank + 1) // self.world_size
        self.share = (stop - start) / size
        return start, stop

    def examples_per_epoch(self) -> int:
        """How many examples this process sees in one (possibly cut) epoch."""
        share = self.share
        total = sum(stop - start for start, stop in map(self.shard, range(len(self))))
        self.share = share
        return total

    def _epoch_order(self) -> tuple[Tensor, torch.Generator]:
        """The current epoch's order of the examples, and its generator, which draws the rest of its randomness."""
        gen = torch.Generator().manual_seed(_epoch_seed(self.seed, self.epoch))
        n = self.num_examples
        return torch.randperm(n, generator=gen) if self.shuffle else torch.arange(n), gen

    def _advance(self, batch: int) -> None:
        """Record that ``batch`` of the current epoch is being handed out."""
        if batch + 1 == len(self):
            self.epoch, self._next_batch = self.epoch + 1, 0
        else:
            self._next_batch = batch + 1

    def state_dict(self) -> dict:
        return {"seed": self.seed, "epoch": self.epoch, "batch": self._next_batch, "batch_size": self.batch_size,
                "num_examples": self.num_examples}

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by :meth:`state_dict` (same data and batch size)."""
        if (state["batch_size"], state["num_examples"]) != (self.batch_size, self.num_examples):
            raise ValueError(f"loader state is for batch_size={state['batch_size']}, {state['num_examples']} "
                             f"examples; this loader has batch_size={self.batch_size}, {self.num_examples} examples")
        self.seed, self.epoch, self._next_batch = state["seed"], state["epoch"], state["batch"]


class TensorLoader(_EpochLoader):
    """Batches of in-memory uint8 images, augmented and normalised per batch, on ``device``. An epoch's randomness is
    drawn up front from its generator, so a run that saves ``state_dict()`` after a step and loads it later gets exactly
    the batches still to come; on an accelerator the split lives there whole, so a batch copies nothing from the
    host."""

    def __init__(self, images: Tensor, labels: Tensor, batch_size: int, *, shuffle: bool, seed: int = 0,
                 augment: Augment = Augment(), mean: Sequence[float], std: Sequence[float],
                 device: torch.device | str = "cpu", max_batches: int | None = None,
                 memory_format: torch.memory_format = torch.contiguous_format, rank: int = 0,
                 world_size: int = 1) -> None:
        data = ImageTensors(images, labels)  # validates dtypes and shapes
        super().__init__(len(data), batch_size, seed, max_batches, rank, world_size, shuffle, device, memory_format)
        if not len(mean) == len(std) == images.shape[1]:
            raise ValueError(f"mean/std need {images.shape[1]} channel values, got {mean} / {std}")
        self.images, self.labels = data.images, data.labels
        self.augment = augment
        self.mean, self.std = tuple(mean), tuple(std)
        if self.device.type != "cpu":  # uint8 on the accelerator: MNIST 47 MB, CIFAR 150 MB, TinyImageNet 1.2 GB
            self.images, self.labels = self.images.to(self.device), self.labels.to(self.device)
        self._mean = torch.tensor(self.mean, dtype=torch.float32, device=self.device)
        self._std = torch.tensor(self.std, dtype=torch.float32, device=self.device)

    def _to_device(self, tensor: Tensor | None) -> Tensor | None:
        """A copy on the loader's device (asynchronous from pinned memory on CUDA); once per epoch."""
        if tensor is None or self.device.type == "cpu":
            return tensor
        if self.device.type == "cuda":
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    def _epoch_randomness(self) -> tuple[Tensor, Tensor | None, Tensor | None]:
        (order, gen), n = self._epoch_order(), self.num_examples
        pad = self.augment.crop_padding
        offsets = torch.randint(0, 2 * pad + 1, (n, 2), generator=gen) if pad else None
        flips = torch.rand(n, generator=gen) < 0.5 if self.augment.hflip else None
        return order, offsets, flips

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        # Drawn on the CPU (the same batches on every device), moved to the data's device once per epoch.
        order, offsets, flips = (self._to_device(t) for t in self._epoch_randomness())
        for b in range(self._next_batch, len(self)):
            pos = slice(*self.shard(b))
            idx = order[pos]
            x = self.images[idx]
            y = self.labels[idx]
            if offsets is not None:
                x = random_crop(x, offsets[pos], self.augment.crop_padding)
            if flips is not None:
                x = hflip(x, flips[pos])
            self._advance(b)
            yield normalize(x, self._mean, self._std).contiguous(memory_format=self.memory_format), y


class DeviceLoader(_EpochLoader):
    """A ``DataLoader`` over a ``Dataset`` with its own transforms (ImageNet), batches moved to ``device``; after a
    mid-epoch resume the remaining batches' crops and flips may differ (they depend on which worker draws them)."""

    def __init__(self, dataset: Dataset, batch_size: int, *, shuffle: bool, seed: int = 0,
                 device: torch.device | str = "cpu", max_batches: int | None = None, num_workers: int = 2,
                 memory_format: torch.memory_format = torch.contiguous_format, rank: int = 0,
                 world_size: int = 1) -> None:
        super().__init__(len(dataset), batch_size, seed, max_batches, rank, world_size, shuffle, device, memory_format)
        self.dataset, self.num_workers = dataset, num_workers

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        order, gen = self._epoch_order()
        start = self._next_batch
        if self.world_size == 1:
            batching = dict(batch_size=self.batch_size,
                            sampler=order[start * self.batch_size : len(self) * self.batch_size].tolist())
        else:  # this process's slice of every remaining global batch
            batching = dict(batch_sampler=[order[slice(*self.shard(b))].tolist() for b in range(start, len(self))])
        loader = DataLoader(self.dataset, **batching, num_workers=self.num_workers, generator=gen,
                            pin_memory=self.device.type == "cuda")
        for b, (x, y) in enumerate(loader, start):
            self.shard(b)  # sets share
            self._advance(b)
            # Pinned batches (pin_memory above) are copied without blocking the host.
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            yield x.contiguous(memory_format=self.memory_format), y


def _missing(what: str, expected: Sequence[Path], root: Path, *, can_download: bool) -> FileNotFoundError:
    paths = "\n  ".join(str(p) for p in expected)
    hint = ("or pass download=True on a machine with internet access." if can_download
            else f"{what} cannot be downloaded automatically.")
    return FileNotFoundError(f"{what} not found under the data root {root.resolve()}. Expected:\n  {paths}\n"
                             f"Set {DATA_ENV_VAR} to the directory that holds the data (on the offline machines "
                             f"{DATA_ENV_VAR}=../shared/data from the repository root), {hint}")


def _fetched(files: list[Path], download: bool, dataset: type, root: Path) -> bool:
    """Whether all ``files`` exist, after torchvision's ``dataset`` downloaded them to ``root`` where some did not and
    ``download``."""
    if download and not all(f.is_file() for f in files):
        dataset(root, download=True)
    return all(f.is_file() for f in files)


def _read_idx(path: Path) -> Tensor:
    """Read an uncompressed uint8 IDX file (MNIST) into a tensor."""
    raw = path.read_bytes()
    if raw[:3] != b"\x00\x00\x08":
        raise ValueError(f"{path} is not a uint8 IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8, offset=4 + 4 * ndim).reshape(shape)


def _unpickle(path: Path) -> dict:
    with path.open("rb") as f:
        return pickle.load(f, encoding="latin1")


def _read_cifar_batches(files: Sequence[Path], label_key: str) -> ImageTensors:
    entries = [_unpickle(p) for p in files]
    data = np.concatenate([e["data"] for e in entries])
    labels = np.concatenate([np.asarray(e[label_key], dtype=np.int64) for e in entries])
    images = torch.from_numpy(data).reshape(-1, 3, 32, 32).contiguous()
    return ImageTensors(images, torch.from_numpy(labels))


def _list_class_tree(base: Path, split: str, classes: Sequence[str], inner: str = "") -> tuple[list[str], list[int]]:
    """JPEG files of ``base/split/<class>/<inner>/`` in ImageFolder order (class, then file name), as paths relative to
    ``base``, with their class indices."""
    files, labels = [], []
    for label, cls in enumerate(classes):
        rel_dir = "/".join(part for part in (split, cls, inner) if part)
        names = sorted(e.name for e in os.scandir(base / rel_dir) if e.name.lower().endswith(JPEG_SUFFIXES))
        files += [f"{rel_dir}/{n}" for n in names]
        labels += [label] * len(names)
    return files, labels


def _subdirs(path: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(path) if e.is_dir())


def _decode_jpegs(base: Path, files: Sequence[str], chunk: int = 4096) -> Tensor:
    """Decode the JPEG files ``base/<file>`` (all of one size; grayscale made RGB) to one uint8 ``(N, 3, H, W)``."""
    parts = []
    for start in range(0, len(files), chunk):
        names = files[start : start + chunk]
        encoded = [torch.frombuffer(bytearray((base / f).read_bytes()), dtype=torch.uint8) for f in names]
        with warnings.catch_warnings():
            # torchvision 0.29 deprecates its image codecs in favour of TorchCodec.
            warnings.filterwarnings("ignore", category=DeprecationWarning, module="torchvision")
            images = decode_jpeg(encoded, mode=ImageReadMode.RGB)
        expected = parts[0].shape[1:] if parts else images[0].shape
        odd = next((f for f, im in zip(names, images) if im.shape != expected), None)
        if odd is not None:
            raise ValueError(f"{base / odd} is not of size {tuple(expected)} like the other images")
        parts.append(torch.stack(images))
    return torch.cat(parts)


def _is_writable_dir(path: Path) -> bool:
    # os.access is always True for root: the mode bits keep a tree made read-only (chmod a-w) untouched.
    return path.is_dir() and os.access(path, os.W_OK) and bool(path.stat().st_mode & 0o222)


def _cache_file(root: Path, source_dir: Path, key: str) -> Path:
    """``<root>/paperlib-cache/<key>.pt`` if the data root is writable, else a file under
    ``~/.cache/paperlib/tensor-cache`` keyed by the source directory."""
    under_root = root / CACHE_DIR_NAME
    if _is_writable_dir(under_root) or (not under_root.exists() and _is_writable_dir(root)):
        return under_root / f"{key}.pt"
    digest = hashlib.sha256(str(source_dir.resolve()).encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "paperlib" / "tensor-cache" / f"{key}-{digest}.pt"


def _fingerprint(files: Sequence[str], labels: Sequence[int]) -> str:
    listing = "\n".join(f"{f}\t{y}" for f, y in zip(files, labels))
    return hashlib.sha256(listing.encode()).hexdigest()


def _decoded_split(root: Path, base: Path, key: str, files: list[str], labels: list[int],
                   subset: int | None) -> ImageTensors:
    """Decoded images of ``files`` (relative to ``base``), via the ``.pt`` cache of the whole split, valid while the
    file list (names and labels) is unchanged. Without a valid cache, a ``subset`` smaller than the split decodes only
    the files it needs and writes no cache."""
    cache = _cache_file(root, base, key)
    fingerprint = _fingerprint(files, labels)
    if cache.exists():
        blob = torch.load(cache, weights_only=True)
        if blob.get("version") == CACHE_FORMAT_VERSION and blob.get("fingerprint") == fingerprint:
            return ImageTensors(blob["images"], blob["labels"]).head(subset)
        logger.warning("stale image cache %s (file list changed); decoding again", cache)
    if subset is not None and subset < len(files):
        files, labels = files[:subset], labels[:subset]
        return ImageTensors(_decode_jpegs(base, files), torch.tensor(labels, dtype=torch.int64))
    start = time.perf_counter()
    data = ImageTensors(_decode_jpegs(base, files), torch.tensor(labels, dtype=torch.int64))
    logger.info("decoded %d images of %s in %.1f s", len(files), base, time.perf_counter() - start)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f"{cache.name}.tmp-{os.getpid()}")
    torch.save({"version": CACHE_FORMAT_VERSION, "fingerprint": fingerprint, "images": data.images,
                "labels": data.labels}, tmp)
    os.replace(tmp, cache)  # atomic: concurrent readers never see a partial file
    logger.info("cached %s", cache)
    return data


def _split_text(kind: str, total: int, kept: int) -> str:
    text = f"official {kind} set ({total:,} images)"
    return text if kept == total else f"first {kept:,} images of the {text}"


def _load_mnist(root: Path, download: bool, subset: int | None) -> DatasetPair:
    raw = root / "MNIST" / "raw"
    files = [raw / f for f in MNIST_FILES]
    if not _fetched(files, download, torchvision.datasets.MNIST, root):  # fetches all four files
        raise _missing("MNIST", files, root, can_download=True)
    train_x, train_y, test_x, test_y = map(_read_idx, files)
    train = ImageTensors(train_x[:, None], train_y.long()).head(subset)
    val = ImageTensors(test_x[:, None], test_y.long()).head(subset)
    return DatasetPair("mnist", train, val, 10, (1, 28, 28), tuple(str(i) for i in range(10)), "torchvision-mnist-idx",
                       _split_text("test", len(test_y), len(val)), MNIST_MEAN, MNIST_STD, Augment(), raw)


def _load_cifar10(root: Path, download: bool, subset: int | None) -> DatasetPair:
    batches, jpeg = root / CIFAR10_BATCHES, root / CIFAR10_JPEG
    augment = Augment(crop_padding=4, hflip=True)
    if _fetched([batches / f for f in CIFAR10_FILES], download, torchvision.datasets.CIFAR10, root):
        train = _read_cifar_batches([batches / f"data_batch_{i}" for i in range(1, 6)], "labels")
        val = _read_cifar_batches([batches / "test_batch"], "labels")
        classes = tuple(_unpickle(batches / "batches.meta")["label_names"])
        return DatasetPair("cifar10", train.head(subset), val.head(subset), 10, (3, 32, 32), classes,
                           "cifar10-python-batches", _split_text("test", len(val), len(val.head(subset))),
                           CIFAR10_MEAN, CIFAR10_STD, augment, batches)
    if not (jpeg / "train").is_dir() or not (jpeg / "test").is_dir():
        raise _missing("CIFAR-10", [batches / f for f in CIFAR10_FILES]
                       + [jpeg / "train/<class>/*.jpg", jpeg / "test/<class>/*.jpg"], root, can_download=True)
    classes = _subdirs(jpeg / "train")
    if _subdirs(jpeg / "test") != classes:
        raise ValueError(f"{jpeg}: train and test class folders differ")
    train_files, train_labels = _list_class_tree(jpeg, "train", classes)
    val_files, val_labels = _list_class_tree(jpeg, "test", classes)
    train = _decoded_split(root, jpeg, "cifar10-jpeg-train", train_files, train_labels, subset)
    val = _decoded_split(root, jpeg, "cifar10-jpeg-test", val_files, val_labels, subset)
    return DatasetPair("cifar10", train, val, len(classes), (3, 32, 32), tuple(classes), "cifar10-jpeg-imagefolder",
                       _split_text("test", len(val_files), len(val)) + ", JPEG re-encoded", CIFAR10_MEAN, CIFAR10_STD,
                       augment, jpeg)


def _load_cifar100(root: Path, download: bool, subset: int | None) -> DatasetPair:
    base = root / CIFAR100_DIR
    files = [base / f for f in CIFAR100_FILES]
    if not _fetched(files, download, torchvision.datasets.CIFAR100, root):
        raise _missing("CIFAR-100", files, root, can_download=True)
    train = _read_cifar_batches([base / "train"], "fine_labels")
    val = _read_cifar_batches([base / "test"], "fine_labels")
    classes = tuple(_unpickle(base / "meta")["fine_label_names"])
    return DatasetPair("cifar100", train.head(subset), val.head(subset), 100, (3, 32, 32), classes,
                       "cifar100-python-batches", _split_text("test", len(val), len(val.head(subset))), CIFAR100_MEAN,
                       CIFAR100_STD, Augment(crop_padding=4, hflip=True), base)


def _load_tinyimagenet(root: Path, subset: int | None) -> DatasetPair:
    base = root / TINYIMAGENET_DIR
    annotations = base / "val" / "val_annotations.txt"
    if not (base / "train").is_dir() or not annotations.is_file():
        raise _missing("TinyImageNet", [base / "train/<wnid>/images/*.JPEG", base / "val/images/*.JPEG",
                                        annotations], root, can_download=False)
    classes = _subdirs(base / "train")
    train_files, train_labels = _list_class_tree(base, "train", classes, inner="images")
    # The official validation images sit in one folder; val_annotations.txt gives their classes (file, wnid, box).
    class_index = {wnid: i for i, wnid in enumerate(classes)}
    val_files, val_labels = [], []
    for line in annotations.read_text().splitlines():
        if line.strip():
            file_name, wnid = line.split("\t")[:2]
            if wnid not in class_index:
                raise ValueError(f"{annotations}: class {wnid} of {file_name} has no training folder")
            val_files.append(f"val/images/{file_name}")
            val_labels.append(class_index[wnid])
    train = _decoded_split(root, base, "tinyimagenet-train", train_files, train_labels, subset)
    val = _decoded_split(root, base, "tinyimagenet-val", val_files, val_labels, subset)
    return DatasetPair("tinyimagenet", train, val, len(classes), (3, 64, 64), tuple(classes),
                       "tinyimagenet-jpeg-folder", _split_text("validation", len(val_files), len(val)), TINYIMAGENET_MEAN, TINYIMAGENET_STD,
                       Augment(crop_padding=4, hflip=True), base)


def imagenet_transforms(train: bool) -> v2.Compose:
    """ImageNet's standard transforms (App. J): RandomResizedCrop(224) + flip for training, resize 256 + center crop 224
    for evaluation; then normalise."""
    if train:
        geometry = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
    else:
        geometry = [v2.Resize(256, antialias=True), v2.CenterCrop(224)]
    return v2.Compose([v2.ToImage(), *geometry, v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def _load_imagenet(root: Path, subset: int | None) -> DatasetPair:
    base = root / IMAGENET_DIR
    if not (base / "train").is_dir() or not (base / "val").is_dir():
        raise _missing("ImageNet", [base / "train/<wnid>/*.JPEG", base / "val/<wnid>/*.JPEG"], root, can_download=False)
    train = torchvision.datasets.ImageFolder(base / "train", transform=imagenet_transforms(True))
    val = torchvision.datasets.ImageFolder(base / "val", transform=imagenet_transforms(False))
    if val.classes != train.classes:
        raise ValueError(f"{base}: train and val class folders differ")
    classes, total_val = tuple(train.classes), len(val)
    if subset is not None:
        train, val = Subset(train, range(min(subset, len(train)))), Subset(val, range(min(subset, total_val)))
    return DatasetPair("imagenet", train, val, len(classes), (3, 224, 224), classes, "imagenet-jpeg-imagefolder",
                       _split_text("validation", total_val, len(val)), IMAGENET_MEAN, IMAGENET_STD, None, base)


def load_dataset(name: str, root: str | Path | None = None, download: bool = False,
                 subset: int | None = None) -> DatasetPair:
    """The train and validation splits of ``name`` (one of :data:`DATASETS`) under ``root`` (:func:`data_root`).

    ``download=True`` lets torchvision fetch MNIST, CIFAR-10 or CIFAR-100. CIFAR-10 is read from
    ``cifar-10-batches-py``, else from ``cifar10-jpeg``; JPEG trees are decoded once and cached
    (``<root>/paperlib-cache/``, or ``~/.cache/paperlib/tensor-cache`` when the root is read-only). ``subset=n`` keeps
    each split's first ``n`` examples."""
    if name not in DATASETS:
        raise ValueError(f"load_dataset: name={name!r} is not supported; allowed values: {', '.join(DATASETS)}")
    if subset is not None and (isinstance(subset, bool) or not isinstance(subset, int) or subset < 1):
        raise ValueError(f"load_dataset: subset must be a positive int or None, got {subset!r}")
    root = data_root() if root is None else Path(root).expanduser()
    if name == "mnist":
        return _load_mnist(root, download, subset)
    if name == "cifar10":
        return _load_cifar10(root, download, subset)
    if name == "cifar100":
        return _load_cifar100(root, download, subset)
    if name == "tinyimagenet":
        return _load_tinyimagenet(root, subset)
    return _load_imagenet(root, subset)
