import os

import numpy as np
import pytest

from ds_fakes import (truncate, write_flat_val, write_image, write_imagenet_train, write_mat,
                      write_meta_mat, mat_struct_array)
from tianyuan.datasets import CorruptImageError, ImageFolder, ImageNet
from tianyuan.datasets import imagenet_meta
from tianyuan.datasets.matfile import read_mat

WNIDS = ["n03000000", "n01000000", "n02000000"]   # devkit (ILSVRC2012_ID) order, not sorted
SHIPPED_TSV, SHIPPED_VAL = imagenet_meta.SHIPPED_TSV, imagenet_meta.SHIPPED_VAL_LABELS


@pytest.fixture(autouse=True)
def no_shipped_class_list(monkeypatch, tmp_path):
    """These tests use made-up wnids; the shipped 1000-class files must not interfere."""
    monkeypatch.setattr(imagenet_meta, "SHIPPED_TSV", str(tmp_path / "absent.tsv"))
    monkeypatch.setattr(imagenet_meta, "SHIPPED_VAL_LABELS", str(tmp_path / "absent.npy"))


def test_shipped_class_list_round_trip(tmp_path, monkeypatch):
    write_meta_mat(str(tmp_path / "meta.mat"), WNIDS)
    tsv = str(tmp_path / "classes.tsv")
    imagenet_meta.write_shipped_tsv(imagenet_meta.read_meta_mat(str(tmp_path / "meta.mat")), tsv)
    monkeypatch.setattr(imagenet_meta, "SHIPPED_TSV", tsv)
    (tmp_path / "meta.mat").unlink()
    write_flat_val(tmp_path, 2)
    (tmp_path / "ILSVRC2012_validation_ground_truth.txt").write_text("2\n3\n")
    ds = ImageNet(tmp_path, "val")
    assert ds.meta.source == tsv and ds.classes == sorted(WNIDS) and ds.targets == [0, 1]


@pytest.mark.parametrize("compress", [False, True])
def test_matfile_reads_struct_arrays(tmp_path, compress):
    path = str(tmp_path / "m.mat")
    write_mat(path, [mat_struct_array("s", [{"a": 1.5, "b": "xyz"}, {"a": 7, "b": "n0"}])],
              compress)
    assert read_mat(path)["s"] == [{"a": 1.5, "b": "xyz"}, {"a": 7.0, "b": "n0"}]


def test_train_folders_sorted_wnid_order(tmp_path):
    write_imagenet_train(tmp_path, WNIDS, per_class=2)
    ds = ImageNet(tmp_path, "train")
    assert len(ds) == 6 and ds.classes == sorted(WNIDS)
    item = ds[0]
    assert item["image"].shape == (8, 8, 3) and item["image"].dtype == np.uint8
    for path, label in ds.samples:
        assert os.path.basename(os.path.dirname(path)) == ds.classes[label]


def test_val_class_folders(tmp_path):
    write_imagenet_train(tmp_path, WNIDS)
    write_image(str(tmp_path / "val" / "n02000000" / "v.JPEG"))
    ds = ImageNet(tmp_path, "val")
    assert [label for _, label in ds.samples] == [1]


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("devkit_dir", [False, True])
def test_flat_val_with_devkit_ground_truth(tmp_path, compress, devkit_dir):
    write_imagenet_train(tmp_path, WNIDS, per_class=1)
    write_flat_val(tmp_path, 4)
    where = tmp_path / "ILSVRC2012_devkit_t12" / "data" if devkit_dir else tmp_path
    write_meta_mat(str(where / "meta.mat"), WNIDS, compress)
    (where / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n3\n2\n1\n")
    ds = ImageNet(tmp_path, "val")
    # ids 1, 3, 2, 1 -> wnids n03, n02, n01, n03 -> sorted indices 2, 1, 0, 2
    assert ds.targets == [2, 1, 0, 2]
    assert ds.class_names[0] == "name of n01000000"


def test_flat_val_with_loc_solution_csv(tmp_path):
    write_imagenet_train(tmp_path, WNIDS, per_class=1)
    write_flat_val(tmp_path, 3)
    rows = ["ImageId,PredictionString",
            "ILSVRC2012_val_00000002,n01000000 1 2 3 4",
            "ILSVRC2012_val_00000001,n03000000 1 2 3 4 n03000000 0 0 2 2",
            "ILSVRC2012_val_00000003,n02000000 0 0 5 5"]
    (tmp_path / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    assert ImageNet(tmp_path, "val").targets == [2, 0, 1]


def test_synset_mapping_gives_class_list_without_train(tmp_path):
    write_flat_val(tmp_path, 1)
    mapping = "".join(f"{w} name {w}\n" for w in sorted(WNIDS))
    (tmp_path / "LOC_synset_mapping.txt").write_text(mapping)
    (tmp_path / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\nILSVRC2012_val_00000001,n02000000 0 0 1 1\n")
    ds = ImageNet(tmp_path, "val")
    assert ds.targets == [1] and ds.class_names[1] == "name n02000000"


def test_ground_truth_txt_without_meta_is_an_error(tmp_path):
    write_imagenet_train(tmp_path, WNIDS, per_class=1)
    write_flat_val(tmp_path, 2)
    (tmp_path / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n2\n")
    with pytest.raises(FileNotFoundError, match="meta.mat"):
        ImageNet(tmp_path, "val")


def test_missing_paths_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ImageNet(tmp_path / "nope", "train")
    write_imagenet_train(tmp_path, WNIDS, per_class=1)
    with pytest.raises(FileNotFoundError, match=r"val.*does not exist"):
        ImageNet(tmp_path, "val")
    write_flat_val(tmp_path, 1)
    with pytest.raises(FileNotFoundError, match="no ground truth"):
        ImageNet(tmp_path, "val")


def test_val_file_without_label_is_an_error(tmp_path):
    write_imagenet_train(tmp_path, WNIDS, per_class=1)
    write_flat_val(tmp_path, 3)
    (tmp_path / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\nILSVRC2012_val_00000001,n02000000 0 0 1 1\n")
    with pytest.raises(ValueError, match="ILSVRC2012_val_00000002.JPEG has no row"):
        ImageNet(tmp_path, "val")


def test_corrupt_and_truncated_images(tmp_path):
    write_image(str(tmp_path / "a" / "good.jpg"))
    write_image(str(tmp_path / "a" / "trunc.jpg"), 64, 64)
    truncate(str(tmp_path / "a" / "trunc.jpg"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "junk.png").write_bytes(b"not an image at all")
    ds = ImageFolder(tmp_path)
    assert ds[0]["image"].shape == (8, 8, 3)
    with pytest.raises(CorruptImageError, match="trunc.jpg"):
        ds[1]
    with pytest.raises(CorruptImageError, match="junk.png"):
        ds[2]
    skipping = ImageFolder(tmp_path, on_error="skip")
    with pytest.warns(RuntimeWarning, match="skipping unreadable image"):
        assert skipping[1] is None
    assert skipping[2] is None and skipping.num_skipped == 2


def test_image_folder_labels_and_png(tmp_path):
    write_image(str(tmp_path / "cat" / "1.png"), colour=(1, 2, 3))
    write_image(str(tmp_path / "ant" / "deep" / "2.jpg"))
    ds = ImageFolder(tmp_path)
    assert ds.classes == ["ant", "cat"] and ds.targets == [0, 1]
    assert ds[1]["image"][0, 0].tolist() == [1, 2, 3]   # RGB order kept
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty holds no images"):
        ImageFolder(tmp_path)


def test_both_backends_decode_the_same_picture(tmp_path):
    """cv2 and Pillow disagreed on a phone photo's EXIF rotation and on 16-bit grey PNGs
    (Pillow's convert clipped them at 255)."""
    from PIL import Image

    from tianyuan.datasets.base import decode_image
    rgb = np.zeros((6, 10, 3), np.uint8)
    rgb[:, :5, 0], rgb[:3, :, 1], rgb[..., 2] = 200, 150, np.arange(10)[None] * 25
    rotated = Image.fromarray(rgb)
    exif = rotated.getexif()
    exif[0x0112] = 6  # orientation: shown turned 90 degrees clockwise
    rotated.save(tmp_path / "phone.jpg", quality=95, exif=exif)
    Image.fromarray(rgb[..., 2].astype(np.uint16) * 257).save(tmp_path / "grey16.png")
    Image.fromarray(np.dstack([rgb, rgb[..., :1]])).save(tmp_path / "rgba.png")
    Image.fromarray(rgb).convert("P").save(tmp_path / "palette.png")
    for name, shape in [("phone.jpg", (10, 6, 3)), ("grey16.png", (6, 10, 3)),
                        ("rgba.png", (6, 10, 3)), ("palette.png", (6, 10, 3))]:
        a, b = (decode_image(str(tmp_path / name), backend) for backend in ("cv2", "pil"))
        assert a.shape == b.shape == shape, name
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1, name
    grey = decode_image(str(tmp_path / "grey16.png"), "pil")
    assert grey[0, :, 0].tolist() == (np.arange(10) * 25).tolist()


def test_shipped_class_list_and_val_labels():
    meta = imagenet_meta.read_shipped_tsv(SHIPPED_TSV)
    assert len(meta) == 1000 and meta.wnids == sorted(set(meta.wnids)) and all(meta.names)
    assert meta.wnids[65] == "n01751748" and meta.names[65] == "sea snake"
    assert meta.id_to_wnid == {}   # the source has no ILSVRC2012 ids; the column is empty
    labels = imagenet_meta.read_shipped_val_labels(SHIPPED_VAL)
    assert labels[:2].tolist() == [65, 970] and np.bincount(labels).tolist() == [50] * 1000
    assert os.path.getsize(SHIPPED_VAL) < 200_000


def test_flat_val_without_any_ground_truth_uses_shipped_labels(tmp_path, monkeypatch):
    monkeypatch.setattr(imagenet_meta, "SHIPPED_TSV", SHIPPED_TSV)
    monkeypatch.setattr(imagenet_meta, "SHIPPED_VAL_LABELS", SHIPPED_VAL)
    write_flat_val(tmp_path, 2)
    write_image(str(tmp_path / "val" / "ILSVRC2012_val_00050000.JPEG"))
    ds = ImageNet(tmp_path, "val")
    last = int(imagenet_meta.read_shipped_val_labels()[-1])
    assert ds.targets == [65, 970, last] and ds.label_source == SHIPPED_VAL
    assert ds.classes[65] == "n01751748" and ds[0]["label"] == 65
    (tmp_path / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + "".join(
        f"ILSVRC2012_val_{n:08d},n01440764 0 0 1 1\n" for n in (1, 2, 50000)))
    ds = ImageNet(tmp_path, "val")   # a ground-truth file in root wins over the shipped labels
    assert ds.targets == [0, 0, 0] and ds.label_source == str(tmp_path / "LOC_val_solution.csv")


def test_empty_id_column_needs_meta_mat_for_devkit_ground_truth(tmp_path, monkeypatch):
    tsv = str(tmp_path / "classes.tsv")
    imagenet_meta.write_shipped_tsv(imagenet_meta.ImageNetMeta(WNIDS), tsv, require_ids=False)
    monkeypatch.setattr(imagenet_meta, "SHIPPED_TSV", tsv)
    write_flat_val(tmp_path, 2)
    (tmp_path / "ILSVRC2012_validation_ground_truth.txt").write_text("2\n3\n")
    with pytest.raises(FileNotFoundError, match="needs the devkit's meta.mat.*has no ids"):
        ImageNet(tmp_path, "val")
    write_meta_mat(str(tmp_path / "meta.mat"), WNIDS)
    ds = ImageNet(tmp_path, "val")   # ids 2, 3 -> n01, n02 -> sorted indices 0, 1
    assert ds.meta.source == tsv and ds.targets == [0, 1]
    with open(tsv, "a") as handle:
        handle.write("n04000000\t4\tpartly numbered\n")
    with pytest.raises(ValueError, match="on every line or on none"):
        imagenet_meta.read_shipped_tsv(tsv)


def _claiming(path, width, height):
    """A real 2 x 2 PNG whose header claims width x height (the CRC recomputed)."""
    import struct
    import zlib

    from PIL import Image
    Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(path)
    data = bytearray(open(path, "rb").read())
    ihdr = bytearray(data[12:29])                       # "IHDR" + 13 bytes
    ihdr[4:12] = struct.pack(">II", width, height)
    data[12:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)))
    open(path, "wb").write(bytes(data))
    return str(path)


@pytest.mark.parametrize("backend", ["cv2", "pil"])
def test_a_header_claiming_too_many_pixels_is_refused_by_both_backends(tmp_path, backend):
    """A tiny file whose header claims 20000 x 20000 had decoded to 1.2 GB of junk (cv2);
    over 2^30 pixels cv2 raised its own error, which on_error="skip" did not catch."""
    from tianyuan.datasets import CorruptImageError, set_max_image_pixels
    from tianyuan.datasets.base import decode_image
    for side in (20000, 40000):
        bomb = _claiming(tmp_path / f"bomb{side}.png", side, side)
        with pytest.raises(CorruptImageError, match=f"bomb{side}.png: "):
            decode_image(bomb, backend)
    small = str(tmp_path / "small.png")
    from PIL import Image
    Image.fromarray(np.zeros((4, 5, 3), np.uint8)).save(small)
    old = set_max_image_pixels(19)
    try:
        with pytest.raises(CorruptImageError, match=r"claims 5 x 4 pixels, over the limit of 19"):
            decode_image(small, backend)
    finally:
        set_max_image_pixels(old)
    assert decode_image(small, backend).shape == (4, 5, 3)
