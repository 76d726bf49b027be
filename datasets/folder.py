"""ImageFolder: `root/<class>/**/<image>`, classes in sorted folder-name order.

>>> ds = ImageFolder("my_data/train")          # doctest: +SKIP
>>> ds.classes, ds[0]["label"]                  # doctest: +SKIP
"""
import os

from .base import IMAGE_EXTENSIONS, VisionDataset, require_path


def find_classes(folder, owner):
    """Sorted sub-folder names of `folder` (hidden ones ignored)."""
    require_path(folder, "one sub-folder per class", owner)
    classes = sorted(entry.name for entry in os.scandir(folder)
                     if entry.is_dir() and not entry.name.startswith("."))
    if not classes:
        raise FileNotFoundError(f"{owner}: {folder} has no class sub-folders; expected "
                                "<class_name>/<image> files there")
    return classes


def scan_class_folders(folder, classes, class_to_index, owner):
    """[(path, label)] for every image under folder/<class>/, walking sub-folders, sorted."""
    samples = []
    for name in classes:
        class_dir = os.path.join(folder, name)
        found = []
        for dirpath, dirnames, filenames in os.walk(class_dir, followlinks=True):
            dirnames.sort()
            found += [os.path.join(dirpath, f) for f in sorted(filenames)
                      if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith(".")]
        if not found:
            raise FileNotFoundError(f"{owner}: class folder {class_dir} holds no images "
                                    f"(extensions {IMAGE_EXTENSIONS})")
        samples += [(path, class_to_index[name]) for path in found]
    return samples


class ImageFolder(VisionDataset):
    """A classification dataset from class sub-folders; items {"image", "label", "info"}."""

    def __init__(self, root, transform=None, on_error="raise", backend="cv2", classes=None):
        super().__init__(root, transform, on_error, backend)
        owner = type(self).__name__
        self.classes = list(classes) if classes is not None else find_classes(self.root, owner)
        self.class_to_index = {name: i for i, name in enumerate(self.classes)}
        self.samples = scan_class_folders(self.root, self.classes, self.class_to_index, owner)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        image = self.load_image(path)
        if image is None:
            return None
        info = {"index": int(index), "file_name": path, "orig_size": image.shape[:2]}
        return self.finish({"image": image, "label": label, "info": info})

    @property
    def targets(self):
        return [label for _, label in self.samples]
