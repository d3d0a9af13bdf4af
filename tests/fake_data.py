"""Writers of tiny datasets in the real on-disk formats, shared by the data and notebook tests."""

import pickle
from pathlib import Path

import numpy as np
from PIL import Image


def write_idx(path: Path, array: np.ndarray) -> None:
    """uint8 IDX file as in the original MNIST distribution."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def make_mnist(root: Path, n_train: int = 7, n_test: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for name, array in arrays.items():
        write_idx(raw / name, array)
    return arrays


def dump(path: Path, obj) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f)


def make_cifar10_batches(root: Path, per_batch: int = 2, n_test: int = 3, seed: int = 0):
    """cifar-10-batches-py: five training batches, a test batch and batches.meta."""
    rng = np.random.default_rng(seed)
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    train_x, train_y = [], []
    for i in range(1, 6):
        x = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        y = rng.integers(0, 10, per_batch).tolist()
        dump(base / f"data_batch_{i}", {"batch_label": f"training batch {i} of 5", "data": x, "labels": y})
        train_x.append(x)
        train_y += y
    test_x = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    test_y = rng.integers(0, 10, n_test).tolist()
    dump(base / "test_batch", {"data": test_x, "labels": test_y})
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    dump(base / "batches.meta", {"label_names": names, "num_vis": 3072})
    return np.concatenate(train_x).reshape(-1, 3, 32, 32), train_y, test_x.reshape(-1, 3, 32, 32), test_y, names


def make_cifar100(root: Path, n_train: int = 6, n_test: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    base = root / "cifar-100-python"
    base.mkdir(parents=True)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = rng.integers(0, 100, n).tolist()
        coarse = rng.integers(0, 20, n).tolist()
        dump(base / split, {"data": x, "fine_labels": fine, "coarse_labels": coarse})
        out[split] = (x.reshape(-1, 3, 32, 32), fine)
    fine_names = [f"fine{i:02d}" for i in range(100)]
    dump(base / "meta", {"fine_label_names": fine_names, "coarse_label_names": [f"c{i}" for i in range(20)]})
    return out, fine_names


def color_of(label: int, index: int) -> tuple[int, int, int]:
    """A distinct flat colour per image: flat images survive JPEG almost exactly."""
    return (40 + 20 * label, 200 - 15 * index, 60 + 30 * (index % 3))


def save_flat(path: Path, size: int, rgb, mode: str = "RGB", fmt: str = "JPEG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    value = rgb[0] if mode == "L" else rgb
    Image.new(mode, (size, size), value).save(path, fmt, **({"quality": 95} if fmt == "JPEG" else {}))


def make_cifar10_jpeg(root: Path, per_class: dict[str, int]):
    """cifar10-jpeg/{train,test}/<class>/NNNN.jpg with flat colours; returns expected (colour, label) lists."""
    classes = sorted(per_class)
    expected = {}
    for split in ("train", "test"):
        rows = []
        for label, cls in enumerate(classes):
            for i in range(per_class[cls] if split == "train" else 1):
                save_flat(root / "cifar10-jpeg" / split / cls / f"{i:04d}.jpg", 32, color_of(label, i))
                rows.append((color_of(label, i), label))
        expected[split] = rows
    return classes, expected


def make_tinyimagenet(root: Path, wnids=("n02", "n01", "n03"), per_class: int = 2):
    base = root / "tiny-imagenet-200"
    classes = sorted(wnids)
    for label, wnid in enumerate(classes):
        for i in range(per_class):
            save_flat(base / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", 64, color_of(label, i))
        (base / "train" / wnid / f"{wnid}_boxes.txt").write_text("not an image\n")
    # Validation: one folder, classes from the annotation file (deliberately not sorted by class).
    val_rows = [("val_0.JPEG", "n03"), ("val_1.JPEG", "n01"), ("val_2.JPEG", "n02"), ("val_3.JPEG", "n01")]
    lines = []
    for i, (file_name, wnid) in enumerate(val_rows):
        mode = "L" if i == 3 else "RGB"  # TinyImageNet contains some grayscale JPEGs
        save_flat(base / "val" / "images" / file_name, 64, color_of(classes.index(wnid), i), mode=mode)
        lines.append(f"{file_name}\t{wnid}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return classes, val_rows


def make_imagenet(root: Path, wnids=("n001", "n002"), per_class: int = 2, size: int = 240) -> None:
    """imagenet/{train,val}/<wnid>/*.png, one flat colour per image."""
    for split, n in (("train", per_class), ("val", 1)):
        for label, wnid in enumerate(wnids):
            for i in range(n):
                save_flat(root / "imagenet" / split / wnid / f"{wnid}_{i}.png", size + 20 * i, color_of(label, i),
                          fmt="PNG")
