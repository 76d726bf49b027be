"""The preprocessing published weights expect, and the one definition of ImageNet's mean and
std that every other copy derives from (the zoo's cards, the manifest's presets, the
transforms' 0..255 defaults).

A preset: resize the shorter side to `resize`, centre-crop `crop`, divide the pixels by
`pixel_scale`, then (x - mean) / std per channel, in `channels` order.

>>> TORCHVISION_V1["mean"], pixel_values(IMAGENET_MEAN)
([0.485, 0.456, 0.406], (123.675, 116.28, 103.53))
"""
# torchvision's ImageNet statistics (REFERENCE.md 1d), RGB, for pixels in 0..1
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def pixel_values(values, scale=255.0):
    """`values` for pixels in 0..`scale`: 0.485 -> 123.675. Rounded to 6 decimals, so they
    are the decimal numbers (0.485 * 255 is 123.67499999999998 in binary), the same floats
    the 0..255 tables have always held."""
    return tuple(round(v * scale, 6) for v in values)


# torchvision's V1 eval preset; V2 weights resize to 232
TORCHVISION_V1 = {"resize": 256, "crop": 224, "interpolation": "bilinear", "antialias": True,
                  "pixel_scale": 255.0, "mean": list(IMAGENET_MEAN),
                  "std": list(IMAGENET_STD), "channels": "RGB"}
TORCHVISION_V2 = {**TORCHVISION_V1, "resize": 232}
# MegEngine Models' classification: OpenCV's BGR images in 0..255, the same statistics
MEGENGINE = {"resize": 256, "crop": 224, "interpolation": "bilinear", "pixel_scale": 1.0,
             "mean": list(pixel_values(IMAGENET_MEAN))[::-1],
             "std": list(pixel_values(IMAGENET_STD))[::-1], "channels": "BGR"}
# torchvision's Inception-v3 (IMAGENET1K_V1): 342 -> 299; the model's transform_input then
# turns (x - mean) / std into the (x - 0.5) / 0.5 the ported TF weights expect
TORCHVISION_INCEPTION = {**TORCHVISION_V1, "resize": 342, "crop": 299}
# pytorch-fid's Inception, done by the model itself (resize_input, normalize_input): RGB in
# 0..1 resized to exactly 299 x 299 (bilinear, align_corners False, no antialias, no crop),
# then 2x - 1
PYTORCH_FID = {"resize": [299, 299], "crop": None, "interpolation": "bilinear",
               "antialias": False, "pixel_scale": 255.0, "mean": [0.5] * 3, "std": [0.5] * 3,
               "channels": "RGB", "in_model": True}
# a GAN generator's images are RGB in [-1, 1]: pixel = x * 127.5 + 127.5 (the recipes' data
# normalisation, the zoo's GAN cards and the manifest's GAN entries)
GAN_PREPROCESSING = {"resize": None, "crop": None, "pixel_scale": 1.0,
                     "mean": [127.5, 127.5, 127.5], "std": [127.5, 127.5, 127.5],
                     "channels": "RGB"}
# MegEngine Models' official/quantization: BGR in 0..255 less 128 (T.Normalize(mean=128)),
# so that the int8 model's input is the uint8 image shifted
MEGENGINE_QUANT = {**MEGENGINE, "mean": [128.0] * 3, "std": [1.0] * 3}
# torchvision's detectors (GeneralizedRCNNTransform, done by the model itself): RGB in 0..1
# normalised, shorter side resized to min_size unless the longer would pass max_size
# (bilinear, no antialias, no crop), the batch zero-padded to a multiple of size_divisible
TORCHVISION_DETECTION = {"resize": None, "crop": None, "min_size": 800, "max_size": 1333,
                         "size_divisible": 32, "interpolation": "bilinear", "antialias": False,
                         "pixel_scale": 255.0, "mean": list(IMAGENET_MEAN),
                         "std": list(IMAGENET_STD), "channels": "RGB", "in_model": True}
# MegEngine Models' keypoints: cv2's BGR crops at 256x192 normalised by ImageNet's statistics
# in the order its config lists them (R, G, B values applied to B, G, R: no channel swap in
# its pipeline); heatmaps learnt at 0..255 ("0to255" in the names), divided out on load
MEGENGINE_POSE = {"crop": [256, 192], "pixel_scale": 1.0,
                  "mean": list(pixel_values(IMAGENET_MEAN)),
                  "std": list(pixel_values(IMAGENET_STD)), "channels": "BGR",
                  "heatmap_range": 255.0}
