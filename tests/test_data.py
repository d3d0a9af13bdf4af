"""Tests of paperlib.harness.data on tiny datasets written in the real on-disk formats."""

import itertools
import json
from pathlib import Path

import pytest
import torch

from paperlib.harness import data
from paperlib.harness.data import Augment, TensorLoader, hflip, load_dataset, normalize, random_crop

from fake_data import (color_of, make_cifar10_batches, make_cifar10_jpeg, make_cifar100, make_mnist,  # noqa: E402
                       make_tinyimagenet, save_flat)


# --------------------------------------------------------------------------- #
# Data root, names and errors
# --------------------------------------------------------------------------- #


def test_data_root_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("PAPERLIB_DATA", str(tmp_path))
    assert data.data_root() == tmp_path
    monkeypatch.delenv("PAPERLIB_DATA")
    assert data.data_root() == Path.home() / ".cache" / "paperlib" / "data"


def test_unknown_name_raises_value_error(tmp_path):
    with pytest.raises(ValueError, match="name='svhn'") as err:
        load_dataset("svhn", root=tmp_path)
    for allowed in data.DATASETS:
        assert allowed in str(err.value)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("mnist", "MNIST/raw/train-images-idx3-ubyte"),
        ("cifar10", "cifar-10-batches-py/data_batch_1"),
        ("cifar10", "cifar10-jpeg/train"),
        ("cifar100", "cifar-100-python/train"),
        ("tinyimagenet", "tiny-imagenet-200/val/val_annotations.txt"),
        ("imagenet", "imagenet/val"),
    ],
)
def test_missing_data_names_paths_and_env_var(tmp_path, name, expected):
    with pytest.raises(FileNotFoundError) as err:
        load_dataset(name, root=tmp_path)
    message = str(err.value)
    assert str(tmp_path / expected) in message
    assert "PAPERLIB_DATA" in message


def test_subset_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="subset"):
        load_dataset("mnist", root=tmp_path, subset=0)


# --------------------------------------------------------------------------- #
# Lossless formats: exact round trip
# --------------------------------------------------------------------------- #


def test_mnist_idx_round_trip_via_env(monkeypatch, tmp_path):
    arrays = make_mnist(tmp_path)
    monkeypatch.setenv("PAPERLIB_DATA", str(tmp_path))
    pair = load_dataset("mnist")
    assert pair.train.images.shape == (7, 1, 28, 28) and pair.val.images.shape == (5, 1, 28, 28)
    assert pair.train.images.dtype == torch.uint8 and pair.train.labels.dtype == torch.int64
    assert torch.equal(pair.train.images[:, 0], torch.from_numpy(arrays["train-images-idx3-ubyte"]))
    assert torch.equal(pair.val.images[:, 0], torch.from_numpy(arrays["t10k-images-idx3-ubyte"]))
    assert pair.train.labels.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    assert pair.val.labels.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    assert (pair.num_classes, pair.input_shape, pair.source) == (10, (1, 28, 28), "torchvision-mnist-idx")
    assert pair.val_split == "official test set (5 images)"
    assert pair.train_augment == Augment()
    json.dumps(pair.describe())  # run records must be serialisable


def test_mnist_subset_takes_first_examples(tmp_path):
    arrays = make_mnist(tmp_path)
    pair = load_dataset("mnist", root=tmp_path, subset=3)
    assert len(pair.train) == 3 and len(pair.val) == 3
    assert torch.equal(pair.train.images[:, 0], torch.from_numpy(arrays["train-images-idx3-ubyte"][:3]))
    assert pair.val_split == "first 3 images of the official test set (5 images)"


def test_cifar10_python_batches_round_trip(tmp_path):
    train_x, train_y, test_x, test_y, names = make_cifar10_batches(tmp_path)
    pair = load_dataset("cifar10", root=tmp_path)
    assert pair.source == "cifar10-python-batches"
    assert pair.train.images.shape == (10, 3, 32, 32) and pair.val.images.shape == (3, 3, 32, 32)
    assert torch.equal(pair.train.images, torch.from_numpy(train_x))  # batches 1..5 in order
    assert torch.equal(pair.val.images, torch.from_numpy(test_x))
    assert pair.train.labels.tolist() == train_y and pair.val.labels.tolist() == test_y
    assert pair.classes == tuple(names) and pair.num_classes == 10
    assert pair.train_augment == Augment(crop_padding=4, hflip=True)
    assert (pair.mean, pair.std) == (data.CIFAR10_MEAN, data.CIFAR10_STD)


def test_cifar10_prefers_python_batches_over_jpeg(tmp_path):
    make_cifar10_batches(tmp_path)
    make_cifar10_jpeg(tmp_path, {"airplane": 1, "automobile": 1})
    assert load_dataset("cifar10", root=tmp_path).source == "cifar10-python-batches"


def test_cifar100_uses_fine_labels(tmp_path):
    splits, fine_names = make_cifar100(tmp_path)
    pair = load_dataset("cifar100", root=tmp_path)
    assert (pair.source, pair.num_classes, pair.input_shape) == ("cifar100-python-batches", 100, (3, 32, 32))
    assert torch.equal(pair.train.images, torch.from_numpy(splits["train"][0]))
    assert pair.train.labels.tolist() == splits["train"][1]
    assert pair.val.labels.tolist() == splits["test"][1]
    assert pair.classes == tuple(fine_names)
    assert (pair.mean, pair.std) == (data.CIFAR100_MEAN, data.CIFAR100_STD)


# --------------------------------------------------------------------------- #
# JPEG trees and the decode cache
# --------------------------------------------------------------------------- #


def assert_flat_colours(images: torch.Tensor, rows, tol: int = 3) -> None:
    assert images.shape[0] == len(rows)
    for image, (rgb, _) in zip(images, rows):
        expected = torch.tensor(rgb, dtype=torch.int16)[:, None, None]
        assert (image.to(torch.int16) - expected).abs().max() <= tol


def test_cifar10_jpeg_tree_decoded_and_cached_once(tmp_path, monkeypatch):
    per_class = {"cat": 3, "airplane": 2, "bird": 1}
    classes, expected = make_cifar10_jpeg(tmp_path, per_class)
    pair = load_dataset("cifar10", root=tmp_path)
    assert pair.source == "cifar10-jpeg-imagefolder"
    assert pair.classes == ("airplane", "bird", "cat")  # ImageFolder order: sorted folder names
    assert pair.train.images.shape == (6, 3, 32, 32) and pair.train.images.dtype == torch.uint8
    assert pair.train.labels.tolist() == [0, 0, 1, 2, 2, 2]
    assert pair.val.labels.tolist() == [0, 1, 2]
    assert_flat_colours(pair.train.images, expected["train"])
    assert_flat_colours(pair.val.images, expected["test"])
    assert "JPEG" in pair.val_split

    cache = tmp_path / "paperlib-cache" / "cifar10-jpeg-train.pt"
    assert cache.is_file() and (tmp_path / "paperlib-cache" / "cifar10-jpeg-test.pt").is_file()
    mtime = cache.stat().st_mtime_ns

    def no_decoding(*args, **kwargs):
        raise AssertionError("the cached load must not decode")

    monkeypatch.setattr(data, "decode_jpeg", no_decoding)
    again = load_dataset("cifar10", root=tmp_path)
    assert torch.equal(again.train.images, pair.train.images)
    assert torch.equal(again.train.labels, pair.train.labels)
    assert cache.stat().st_mtime_ns == mtime


def test_jpeg_cache_rebuilt_when_files_change(tmp_path):
    make_cifar10_jpeg(tmp_path, {"airplane": 1, "bird": 1})
    assert len(load_dataset("cifar10", root=tmp_path).train) == 2
    save_flat(tmp_path / "cifar10-jpeg" / "train" / "bird" / "0001.jpg", 32, (1, 2, 3))
    pair = load_dataset("cifar10", root=tmp_path)
    assert pair.train.labels.tolist() == [0, 1, 1]


def test_jpeg_subset_without_cache_decodes_only_the_subset(tmp_path, monkeypatch):
    make_cifar10_jpeg(tmp_path, {"airplane": 2, "bird": 2})
    decoded = []
    real_decode = data.decode_jpeg

    def counting_decode(inputs, **kwargs):
        decoded.append(len(inputs))
        return real_decode(inputs, **kwargs)

    monkeypatch.setattr(data, "decode_jpeg", counting_decode)
    pair = load_dataset("cifar10", root=tmp_path, subset=1)
    assert len(pair.train) == 1 and len(pair.val) == 1 and decoded == [1, 1]
    assert not (tmp_path / "paperlib-cache").exists()


def test_cache_goes_to_home_when_data_root_is_read_only(tmp_path, monkeypatch):
    root, home = tmp_path / "data", tmp_path / "home"
    root.mkdir()
    make_cifar10_jpeg(root, {"airplane": 1, "bird": 1})
    monkeypatch.setenv("HOME", str(home))
    root.chmod(0o555)
    try:
        pair = load_dataset("cifar10", root=root)
    finally:
        root.chmod(0o755)
    assert len(pair.train) == 2
    assert not (root / "paperlib-cache").exists()
    assert len(list((home / ".cache" / "paperlib" / "tensor-cache").glob("cifar10-jpeg-*.pt"))) == 2


def test_tinyimagenet_validation_classes_from_annotations(tmp_path):
    classes, val_rows = make_tinyimagenet(tmp_path)
    pair = load_dataset("tinyimagenet", root=tmp_path)
    assert pair.classes == ("n01", "n02", "n03") and pair.num_classes == 3
    assert (pair.input_shape, pair.source) == ((3, 64, 64), "tinyimagenet-jpeg-folder")
    assert pair.train.images.shape == (6, 3, 64, 64)  # the *_boxes.txt files are ignored
    assert pair.train.labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert pair.val.labels.tolist() == [classes.index(w) for _, w in val_rows]
    assert pair.val.images.shape == (4, 3, 64, 64)  # the grayscale JPEG became RGB
    gray = pair.val.images[3].to(torch.int16)
    assert torch.equal(gray[0], gray[1]) and torch.equal(gray[1], gray[2])
    assert pair.val_split == "official validation set (4 images)"
    assert pair.train_augment == Augment(crop_padding=4, hflip=True)
    assert (tmp_path / "paperlib-cache" / "tinyimagenet-val.pt").is_file()


def test_imagenet_imagefolder_with_standard_presets(tmp_path):
    base = tmp_path / "imagenet"
    for split, n in (("train", 2), ("val", 1)):
        for label, wnid in enumerate(("n001", "n002")):
            for i in range(n):
                save_flat(base / split / wnid / f"{wnid}_{i}.png", 240 + 20 * i, color_of(label, i), fmt="PNG")
    pair = load_dataset("imagenet", root=tmp_path)
    assert (pair.num_classes, pair.input_shape, pair.source) == (2, (3, 224, 224), "imagenet-jpeg-imagefolder")
    assert pair.val_split == "official validation set (2 images)" and pair.train_augment is None
    image, label = pair.val[1]
    assert image.shape == (3, 224, 224) and image.dtype == torch.float32 and label == 1
    # A flat image stays flat through resize/crop, so the output is its normalised colour.
    mean, std = torch.tensor(data.IMAGENET_MEAN), torch.tensor(data.IMAGENET_STD)
    expected = (torch.tensor(color_of(1, 0)) / 255 - mean) / std
    torch.testing.assert_close(image, expected[:, None, None].expand(3, 224, 224), atol=1e-5, rtol=0)

    loader = pair.loader("train", 3, seed=0, num_workers=0)
    batches = list(loader)
    assert len(loader) == 2 and [x.shape for x, _ in batches] == [(3, 3, 224, 224), (1, 3, 224, 224)]
    assert sorted(torch.cat([y for _, y in batches]).tolist()) == [0, 0, 1, 1]
    assert len(list(pair.loader("val", 1, max_batches=1, num_workers=0))) == 1

    # Checkpointing mid-epoch resumes with the same examples in the same batches.
    uninterrupted = pair.loader("train", 1, seed=4, num_workers=0)
    reference = [y for _ in range(2) for _, y in uninterrupted]
    interrupted = pair.loader("train", 1, seed=4, num_workers=0)
    head = [y for _, y in itertools.islice(interrupted, 3)]
    resumed = pair.loader("train", 1, seed=0, num_workers=0)
    resumed.load_state_dict(interrupted.state_dict())
    tail = [y for _, y in resumed] + [y for _, y in resumed]
    assert torch.equal(torch.cat(head + tail), torch.cat(reference))
    assert not torch.equal(torch.cat(reference[:4]), torch.cat(reference[4:]))  # epochs differ

    small = load_dataset("imagenet", root=tmp_path, subset=1)
    assert len(small.train) == 1 and small.val_split == "first 1 images of the official validation set (2 images)"


# --------------------------------------------------------------------------- #
# Batch transforms
# --------------------------------------------------------------------------- #


def test_random_crop_matches_slicing_of_zero_padded_image():
    images = torch.randint(0, 256, (3, 2, 5, 6), dtype=torch.uint8)
    offsets = torch.tensor([[0, 0], [4, 1], [2, 2]])
    out = random_crop(images, offsets, padding=2)
    assert out.shape == images.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for i, (dy, dx) in enumerate(offsets.tolist()):
        assert torch.equal(out[i], padded[i, :, dy : dy + 5, dx : dx + 6])
    assert torch.equal(out[2], images[2])  # centre offset = identity
    assert (out[0, :, :2, :] == 0).all() and (out[0, :, :, :2] == 0).all()  # zero padding


def test_hflip_is_exact_mirror_where_masked():
    images = torch.randint(0, 256, (2, 3, 4, 5), dtype=torch.uint8)
    out = hflip(images, torch.tensor([True, False]))
    assert torch.equal(out[0], images[0, :, :, torch.arange(4, -1, -1)])
    assert torch.equal(out[1], images[1])


def test_normalize_values():
    images = torch.tensor([0, 51, 255], dtype=torch.uint8).reshape(1, 1, 1, 3).expand(1, 3, 1, 3)
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 2.0)
    out = normalize(images, mean, std)
    expected = torch.tensor([[(v / 255 - m) / s for v in (0, 51, 255)] for m, s in zip(mean, std)])
    torch.testing.assert_close(out[0, :, 0, :], expected, atol=1e-6, rtol=0)


def test_mnist_val_loader_is_ordered_and_normalised(tmp_path):
    arrays = make_mnist(tmp_path, n_train=4, n_test=5)
    pair = load_dataset("mnist", root=tmp_path)
    loader = pair.loader("val", 2)
    batches = list(loader)
    assert len(loader) == 3 and [len(y) for _, y in batches] == [2, 2, 1]
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    assert y.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    raw = torch.from_numpy(arrays["t10k-images-idx3-ubyte"]).float()[:, None]
    torch.testing.assert_close(x, (raw / 255 - 0.1307) / 0.3081, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- #
# TensorLoader: determinism, augmentation, resumption
# --------------------------------------------------------------------------- #


def identifiable(n: int = 10, size: int = 6):
    """Images whose every pixel is non-zero and unique to the image; label = index."""
    base = torch.arange(size * size, dtype=torch.uint8).reshape(1, 1, size, size) + 1
    images = (base + 40 * torch.arange(n, dtype=torch.uint8).reshape(n, 1, 1, 1)).expand(n, 3, size, size)
    return images.contiguous(), torch.arange(n)


def make_loader(seed: int = 0, **kwargs) -> TensorLoader:
    images, labels = identifiable()
    options = dict(shuffle=True, seed=seed, augment=Augment(crop_padding=2, hflip=True), mean=(0, 0, 0), std=(1, 1, 1))
    options.update(kwargs)
    return TensorLoader(images, labels, 4, **options)


def run_epochs(loader: TensorLoader, epochs: int):
    return [(x.clone(), y.clone()) for _ in range(epochs) for x, y in loader]


def same_batches(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))


def test_loader_is_deterministic_per_seed_and_shuffles_every_epoch():
    first = run_epochs(make_loader(seed=1), 2)
    assert len(first) == 6  # 3 batches (4, 4, 2) per epoch
    assert same_batches(first, run_epochs(make_loader(seed=1), 2))
    assert not same_batches(first, run_epochs(make_loader(seed=2), 2))
    epoch0 = torch.cat([y for _, y in first[:3]])
    epoch1 = torch.cat([y for _, y in first[3:]])
    assert sorted(epoch0.tolist()) == list(range(10)) and sorted(epoch1.tolist()) == list(range(10))
    assert not torch.equal(epoch0, epoch1)


def test_loader_augmentation_is_a_zero_padded_crop_and_optional_mirror():
    images, _ = identifiable()
    loader = make_loader(seed=3)
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2)).float()
    seen_flip = seen_shift = False
    for x, y in run_epochs(loader, 2):
        assert x.shape[1:] == (3, 6, 6) and x.dtype == torch.float32
        for image, label in zip(x, y):
            windows = {(dy, dx, flip): padded[label, :, dy : dy + 6, dx : dx + 6].flip(-1) if flip
                       else padded[label, :, dy : dy + 6, dx : dx + 6]
                       for dy in range(5) for dx in range(5) for flip in (False, True)}
            matches = [k for k, w in windows.items() if torch.equal(image * 255, w)]
            assert len(matches) == 1
            dy, dx, flip = matches[0]
            seen_flip |= flip
            seen_shift |= (dy, dx) != (2, 2)
    assert seen_flip and seen_shift


def test_resumed_loader_reproduces_remaining_batches():
    reference = make_loader(seed=5)
    full = run_epochs(reference, 3)

    interrupted = make_loader(seed=5)
    consumed = run_epochs(interrupted, 1)
    iterator = iter(interrupted)
    consumed += [next(iterator) for _ in range(2)]  # stop after 2 batches of epoch 1
    state = interrupted.state_dict()
    assert (state["epoch"], state["batch"]) == (1, 2)

    resumed = make_loader(seed=0)  # the seed comes from the state
    resumed.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in resumed]  # remainder of epoch 1
    rest += run_epochs(resumed, 1)
    assert same_batches(consumed + rest, full)


def test_state_after_a_full_epoch_points_to_next_epoch():
    loader = make_loader()
    run_epochs(loader, 1)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (1, 0)
    with pytest.raises(ValueError, match="batch_size"):
        TensorLoader(*identifiable(), 5, shuffle=True, mean=(0,) * 3, std=(1,) * 3).load_state_dict(loader.state_dict())


def test_max_batches_cuts_epochs_short():
    loader = make_loader(max_batches=2)
    assert len(loader) == 2
    batches = run_epochs(loader, 2)
    assert len(batches) == 4 and loader.epoch == 2
    full = run_epochs(make_loader(), 1)
    assert same_batches(batches[:2], full[:2])  # same epoch-0 batches as an uncut loader


def test_loader_rejects_bad_inputs():
    images, labels = identifiable()
    with pytest.raises(ValueError, match="uint8"):
        TensorLoader(images.float(), labels, 2, shuffle=False, mean=(0,) * 3, std=(1,) * 3)
    with pytest.raises(ValueError, match="channel"):
        TensorLoader(images, labels, 2, shuffle=False, mean=(0,), std=(1,))


# --------------------------------------------------------------------------- #
# Real data (only when PAPERLIB_DATA points at it)
# --------------------------------------------------------------------------- #

real_mnist = data.data_root() / "MNIST" / "raw" / "train-images-idx3-ubyte"


@pytest.mark.skipif(not real_mnist.is_file(), reason="PAPERLIB_DATA does not point at real MNIST")
def test_real_mnist():
    pair = load_dataset("mnist")
    assert pair.train.images.shape == (60000, 1, 28, 28) and pair.val.images.shape == (10000, 1, 28, 28)
    assert pair.train.labels[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert pair.val.labels[:5].tolist() == [7, 2, 1, 0, 4]
    assert torch.bincount(pair.train.labels).tolist()[:2] == [5923, 6742]
    assert pair.val_split == "official test set (10,000 images)"
    x, y = next(iter(pair.loader("train", 128, seed=0)))
    assert x.shape == (128, 1, 28, 28)
    # Normalised MNIST has roughly zero mean and unit std.
    assert abs(x.mean().item()) < 0.2 and abs(x.std().item() - 1) < 0.2


def test_records_name_the_data_by_content_not_by_path(tmp_path):
    """describe() holds no machine path; its checksum follows the examples read, wherever they lie."""
    import shutil

    make_mnist(tmp_path / "a", n_train=32, n_test=16)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    a, b = load_dataset("mnist", root=tmp_path / "a"), load_dataset("mnist", root=tmp_path / "b")
    assert a.describe() == b.describe()
    assert str(tmp_path) not in json.dumps(a.describe())
    assert load_dataset("mnist", root=tmp_path / "a", subset=8).content_sha256 != a.content_sha256
    images = tmp_path / "b" / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    raw = bytearray(images.read_bytes())
    raw[-1] ^= 1  # one pixel of the last test image
    images.write_bytes(bytes(raw))
    assert load_dataset("mnist", root=tmp_path / "b").content_sha256 != a.content_sha256
