"""The weight manifest: one entry per published set of weights (weights are data).

Checksums: torchvision names its files `<stem>-<sha256 prefix>.pth` and checks that
prefix (REFERENCE.md 1d), so those entries are `sha256_kind="prefix"`. Files whose
name carries no hyphenated prefix (`resnet18_fbgemm_16fa66dd.pth`) and MegEngine's
(`..._4e14b7d1.pkl`, hash function undocumented) have no published checksum:
`sha256_kind="none"`; the tag in the name is kept in `name_tag` for the record only.

>>> entry = get_entry("resnet50.imagenet_torchvision")
>>> entry.urls[0]
'https://download.pytorch.org/models/resnet50-0676ba61.pth'
"""
from dataclasses import dataclass, field, replace
from typing import Optional

from . import preprocessing
from .gan_maps import GAN_PREPROCESSING
from .megengine_detection import differences
from .megengine_detection_layout import COCO_CATEGORY_IDS

TORCHVISION = "https://download.pytorch.org/models/"
MEGENGINE = "https://data.megengine.org.cn/models/weights/"
PYTORCH_FID = "https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
TV_SOURCE = "torchvision 0.29.1 model docs (REFERENCE.md 1a/1b)"
MGE_SOURCE = "MegEngine Models README (REFERENCE.md)"
# URLs of the entries below as the @hub.pretrained decorators in MegEngine/Models give them:
# official/vision/classification/resnet/model.py @46382e35 and shufflenet/model.py @0cefa00c;
# metrics from resnet/README.md @134ad00c and shufflenet/README.md @d67b5efe.
MGE_README = "MegEngine Models official/vision/classification/{resnet,shufflenet}/README.md"
# the 1.0 files and numbers: official/quantization/README.md @1f6ad9c8; the earlier
# resnet18_{normal_69824,qat_69754} files are v0.5's (REFERENCE.md)
MGE_QUANT_README = "MegEngine Models official/quantization/README.md"
MMPRETRAIN = "https://download.openmmlab.com/mmclassification/v0/"
MMPRETRAIN_README = "MMPretrain configs/shufflenet_v1/README.md"

# Preprocessing presets (pixels scaled by 1/pixel_scale, then (x - mean) / std)
TV_V1, TV_V2 = preprocessing.TORCHVISION_V1, preprocessing.TORCHVISION_V2
MGE, MGE_QUANT = preprocessing.MEGENGINE, preprocessing.MEGENGINE_QUANT


@dataclass(frozen=True)
class WeightEntry:
    name: str                   # "<arch>.<dataset>_<source>[_<variant>]"
    arch: str                   # builder name in tianyuan.zoo
    urls: tuple                 # primary first, then mirrors (http(s), file://, paths)
    sha256: Optional[str]       # full digest or published prefix; None if unpublished
    sha256_kind: str            # "full" | "prefix" | "none"
    format: str                 # "torchvision" | "megengine" | "safetensors"
    converter: Optional[str]    # name map ("torchvision", "megengine", "quantized"); None: none yet
    preprocessing: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)   # {"top1": 76.13, "top5": 92.862}
    metric_source: str = ""
    float_parent: Optional[str] = None            # int8 entries: the float entry's name
    name_tag: Optional[str] = None                # hex tag in the file name, not verified
    notes: str = ""
    # detection heads remapped on import: the file's k-th class (after its background, if
    # any) -> our class column (COCO category id); None: the file's columns are ours
    label_map: Optional[tuple] = None

    @property
    def file_name(self):
        return self.urls[0].rstrip("/").rsplit("/", 1)[-1]

    @property
    def cache_relpath(self):
        """Relative to `$TIANYUAN_HOME/weights`: `<format>/<file name>`."""
        return f"{self.format}/{self.file_name}"


def _tv(name, arch, stem, prefix, top1, top5, pre=TV_V1, notes=""):
    return WeightEntry(name, arch, (f"{TORCHVISION}{stem}-{prefix}.pth",), prefix, "prefix",
                       "torchvision", "torchvision", pre, {"top1": top1, "top5": top5},
                       TV_SOURCE, notes=notes)


def _tv_q(name, arch, file, top1, top5, parent, pre=TV_V1, notes=""):
    stem = file[:-len(".pth")]
    hyphen = "-" in stem  # torch.hub checks the prefix only after a hyphen
    tag = stem.rsplit("-" if hyphen else "_", 1)[-1]
    return WeightEntry(name, arch, (f"{TORCHVISION}quantized/{file}",), tag if hyphen else None,
                       "prefix" if hyphen else "none", "torchvision", "quantized", pre,
                       {"top1": top1, "top5": top5}, TV_SOURCE, parent,
                       None if hyphen else tag, notes)


def _mge(name, arch, file, top1, top5=None, converter="megengine", parent=None, notes="",
         source=MGE_SOURCE, pre=MGE):
    metrics = {"top1": top1} if top5 is None else {"top1": top1, "top5": top5}
    tag = file[:-len(".pkl")].rsplit("_", 1)[-1]
    tag = tag if len(tag) == 8 and all(c in "0123456789abcdef" for c in tag) else None
    return WeightEntry(name, arch, (MEGENGINE + file,), None, "none", "megengine", converter,
                       pre, metrics, source, parent, tag, notes)


def _mge_q(name, arch, file, top1, parent=None, notes=""):
    """MegEngine Models' official/quantization files: download only (no name map yet)."""
    return _mge(name, arch, file, top1, converter=None, parent=parent, pre=MGE_QUANT,
                source=MGE_QUANT_README, notes=notes or _MGE_Q)


MGE_POSE = preprocessing.MEGENGINE_POSE     # person crops, heatmaps at 0..255 (see there)
_MGE_POSE_NOTES = ("MegEngine Models official/vision/keypoints; its test decodes with a 17x17 "
                   "Gaussian blur and a 0.35-pixel shift toward the second maximum, and flips "
                   "without the one-pixel shift, so our decoding may differ by a few tenths")


def _mge_pose(arch, file, ap):
    tag = file[:-len(".pkl")].rsplit("_", 1)[-1]
    return WeightEntry(f"{arch}.coco_megengine", arch, (f"{MEGENGINE}keypoint_models/{file}",),
                       None, "none", "megengine", "megengine", MGE_POSE, {"kp_map": ap},
                       MGE_SOURCE, name_tag=tag if len(tag) == 6 else None,
                       notes=_MGE_POSE_NOTES + ("; the file name's tag differs from the table"
                                                if arch.startswith("simplebaseline") else ""))


# MegEngine Models' detectors (official/vision/detection; names: megengine_detection.py),
# COCO val2017 box AP from the README at the commit that published each file: the v0.5 files
# (@da3bf2b4, 2020-07), Models 1.0's (v1.0.0, 2020-10) and the 3x ones (@12a30a10, 2021-02). Their
# R34, R101 and ResNeXt101 files have no zoo builder, FCOS/ATSS no counterpart; FreeAnchor's
# 3x files are RetinaNet's network with P6 from P5, as ours (its 1x/2x ones: from C5).
MGE_DET_README = "MegEngine Models official/vision/detection/README.md"
_MGE_RETINANET = ("MegEngine's RetinaNet convolves P6 from C5 ({c5} channels) where the zoo's "
                  "builds it from P5, so it is refused on import (megengine_detection.py); "
                  "download only. Else: ")
_MGE_FREEANCHOR = ("FreeAnchor (trained with its own loss) is RetinaNet's network with P6 from "
                   "P5, as ours: converted (conv1 to RGB, codes times its std (0.1, 0.1, 0.2, "
                   "0.2), anchor order and half-stride offset, 80 classes to the 91 COCO ids "
                   "(label_map)); not reproduced, so its AP is MegEngine's, not measured here: ")
_MGE_FASTER = ("converted: BGR conv1 to RGB, FPN biases{fold}, RPN {rpn}, 81 columns to the "
               "91 COCO ids (label_map){shift}; not reproduced, so its AP is MegEngine's, not "
               "measured here: ")


def _mge_det(arch, variant, file, ap, gen):
    """A MegEngine Models COCO detector (`gen`: "v0.5" or "v1", the code that trained it)."""
    retinanet = arch.startswith("retinanet")
    refused = retinanet and not variant.startswith("freeanchor")
    rest = "; ".join(differences("retinanet" if retinanet else "fasterrcnn", gen))
    if refused:
        notes = _MGE_RETINANET.format(c5=512 if "resnet18" in arch else 2048) + rest
    elif retinanet:
        notes = _MGE_FREEANCHOR + rest
    else:
        notes = _MGE_FASTER.format(
            fold=" (its SyncBN folded in)" if "syncbn" in variant else "",
            rpn="foreground logit (v0.5 ranks by it)" if gen == "v0.5" else "logit as is",
            shift="" if gen == "v0.5" else ", anchor half-stride offset in the RPN codes") + rest
    tag = file[:-len(".pkl")].rsplit("_", 1)[-1]
    return WeightEntry(f"{arch}.coco_megengine_{variant}", arch, (MEGENGINE + file,), None,
                       "none", "megengine", None if refused else "megengine",
                       preprocessing.TORCHVISION_DETECTION, {"box_map": ap}, MGE_DET_README,
                       name_tag=tag, notes=notes, label_map=COCO_CATEGORY_IDS)


_LEGACY = "2017 legacy-format release of the V1 weights (a loader test vector)"
_QUANT = "int8 weights; needs the int8 zoo model (loads as flattened integer arrays for now)"
_MGE_SNET_WIDE = ("MegEngine/Megvii ShuffleNetV2: stage 2's first unit has branch_proj 24 -> 24 "
                  "and branch_main 24 -> {main} channels where ours has two of {half}; not "
                  "convertible to our (torchvision-layout) model, download only")
_MGE_SNET_TAG = "file name's accuracy tag ({tag}) differs from the README's top-1"
_MGE_Q = ("MegEngine official/quantization model (fused ConvBn names); downloadable, "
          "no name map yet")
_MGE_SNET_V1 = ("MegEngine's own ShuffleNetV1 (a 1x1 stride-2 projection added where ours "
                "concatenates a pooled input, megvii_maps.py): another network, so not "
                "convertible; its published numbers, not ours to reproduce")

ENTRIES = [
    _tv("resnet18.imagenet_torchvision", "resnet18", "resnet18", "f37072fd", 69.758, 89.078),
    _tv("resnet34.imagenet_torchvision", "resnet34", "resnet34", "b627a593", 73.314, 91.420),
    _tv("resnet50.imagenet_torchvision", "resnet50", "resnet50", "0676ba61", 76.130, 92.862),
    _tv("resnet50.imagenet_torchvision_v2", "resnet50", "resnet50", "11ad3fa6", 80.858, 95.434,
        TV_V2),
    _tv("resnet101.imagenet_torchvision", "resnet101", "resnet101", "63fe2227", 77.374, 93.546),
    _tv("resnet101.imagenet_torchvision_v2", "resnet101", "resnet101", "cd907fc2", 81.886,
        95.780, TV_V2),
    _tv("resnet152.imagenet_torchvision", "resnet152", "resnet152", "394f9c45", 78.312, 94.046),
    _tv("resnet152.imagenet_torchvision_v2", "resnet152", "resnet152", "f82ba261", 82.284,
        96.002, TV_V2),
    _tv("mobilenet_v2.imagenet_torchvision", "mobilenet_v2", "mobilenet_v2", "b0353104", 71.878,
        90.286),
    _tv("mobilenet_v2.imagenet_torchvision_v2", "mobilenet_v2", "mobilenet_v2", "7ebf99e0",
        72.154, 90.822, TV_V2),
    _tv("shufflenet_v2_x0_5.imagenet_torchvision", "shufflenet_v2_x0_5", "shufflenetv2_x0.5",
        "f707e7126e", 60.552, 81.746),
    _tv("shufflenet_v2_x1_0.imagenet_torchvision", "shufflenet_v2_x1_0", "shufflenetv2_x1",
        "5666bf0f80", 69.362, 88.316),
    _tv("shufflenet_v2_x1_5.imagenet_torchvision", "shufflenet_v2_x1_5", "shufflenetv2_x1_5",
        "3c479a10", 72.996, 91.086, TV_V2),
    _tv("shufflenet_v2_x2_0.imagenet_torchvision", "shufflenet_v2_x2_0", "shufflenetv2_x2_0",
        "8be3c8ee", 76.230, 93.006, TV_V2),
    _tv("resnet18.imagenet_torchvision_legacy", "resnet18", "resnet18", "5c106cde", 69.758,
        89.078, notes=_LEGACY),
    _tv("resnet50.imagenet_torchvision_legacy", "resnet50", "resnet50", "19c8e357", 76.130,
        92.862, notes=_LEGACY),
    _tv("resnet101.imagenet_torchvision_legacy", "resnet101", "resnet101", "5d3b4d8f", 77.374,
        93.546, notes=_LEGACY),
    _tv("resnet152.imagenet_torchvision_legacy", "resnet152", "resnet152", "b121ed2d", 78.312,
        94.046, notes=_LEGACY),
    _tv_q("resnet18_int8.imagenet_torchvision_fbgemm", "resnet18", "resnet18_fbgemm_16fa66dd.pth",
          69.494, 88.882, "resnet18.imagenet_torchvision", notes=_QUANT),
    _tv_q("resnet50_int8.imagenet_torchvision_fbgemm", "resnet50", "resnet50_fbgemm_bf931d71.pth",
          75.920, 92.814, "resnet50.imagenet_torchvision", notes=_QUANT),
    _tv_q("resnet50_int8.imagenet_torchvision_fbgemm_v2", "resnet50",
          "resnet50_fbgemm-23753f79.pth", 80.282, 94.976, "resnet50.imagenet_torchvision_v2",
          TV_V2, notes=_QUANT),
    _tv_q("mobilenet_v2_int8.imagenet_torchvision_qnnpack", "mobilenet_v2",
          "mobilenet_v2_qnnpack_37f702c5.pth", 71.658, 90.150,
          "mobilenet_v2.imagenet_torchvision", notes=_QUANT + "; per-tensor (qnnpack, QAT)"),
    _tv_q("shufflenet_v2_x0_5_int8.imagenet_torchvision_fbgemm", "shufflenet_v2_x0_5",
          "shufflenetv2_x0.5_fbgemm-00845098.pth", 57.972, 79.780,
          "shufflenet_v2_x0_5.imagenet_torchvision", notes=_QUANT),
    _tv_q("shufflenet_v2_x1_0_int8.imagenet_torchvision_fbgemm", "shufflenet_v2_x1_0",
          "shufflenetv2_x1_fbgemm-1e62bb32.pth", 68.360, 87.582,
          "shufflenet_v2_x1_0.imagenet_torchvision", notes=_QUANT),
    _tv_q("shufflenet_v2_x1_5_int8.imagenet_torchvision_fbgemm", "shufflenet_v2_x1_5",
          "shufflenetv2_x1_5_fbgemm-d7401f05.pth", 72.052, 90.700,
          "shufflenet_v2_x1_5.imagenet_torchvision", TV_V2, notes=_QUANT),
    _tv_q("shufflenet_v2_x2_0_int8.imagenet_torchvision_fbgemm", "shufflenet_v2_x2_0",
          "shufflenetv2_x2_0_fbgemm-5cac526c.pth", 75.354, 92.488,
          "shufflenet_v2_x2_0.imagenet_torchvision", TV_V2, notes=_QUANT),
    _mge("resnet18.imagenet_megengine", "resnet18", "resnet18_naiveaug_70312_78a63ca6.pkl",
         70.312, 89.430, source=MGE_README),
    _mge("resnet34.imagenet_megengine", "resnet34", "resnet34_naiveaug_73960_fd9d869d.pkl",
         73.960, 91.630, source=MGE_README),
    _mge("resnet50.imagenet_megengine", "resnet50", "resnet50_fbaug_76254_4e14b7d1.pkl",
         76.254, 93.056),
    _mge("resnet101.imagenet_megengine", "resnet101", "resnet101_fbaug_77944_b7932921.pkl",
         77.944, 93.844, source=MGE_README),
    _mge("resnet152.imagenet_megengine", "resnet152", "resnet152_fbaug_78582_7551aff3.pkl",
         78.582, 94.130, source=MGE_README),
    _mge("shufflenet_v2_x0_5.imagenet_megengine", "shufflenet_v2_x0_5",
         "snetv2_x0_5_60750_c28db1a2.pkl", 60.696, 82.190, source=MGE_README,
         notes="converted by channel permutation (megvii_maps.py); "
               + _MGE_SNET_TAG.format(tag="60.750")),
    _mge("shufflenet_v2_x1_0.imagenet_megengine", "shufflenet_v2_x1_0",
         "snetv2_x1_0_69369_daf9dba0.pkl", 69.372, 88.764, converter=None, source=MGE_README,
         notes=_MGE_SNET_WIDE.format(main=92, half=58)),
    _mge("shufflenet_v2_x1_5.imagenet_megengine", "shufflenet_v2_x1_5",
         "snetv2_x1_5_72775_38ac4273.pkl", 72.806, 90.792, converter=None, source=MGE_README,
         notes=_MGE_SNET_WIDE.format(main=152, half=88)),
    _mge("shufflenet_v2_x2_0.imagenet_megengine", "shufflenet_v2_x2_0",
         "snetv2_x2_0_75115_497d4601.pkl", 75.074, 92.278, converter=None, source=MGE_README,
         notes=_MGE_SNET_WIDE.format(main=220, half=122)),
    _mge_q("resnet18.imagenet_megengine_quant_float", "resnet18", "resnet18_normal_69824.pkl",
           69.824),
    _mge_q("resnet18_int8.imagenet_megengine_qat", "resnet18", "resnet18_qat_69754.pkl", 69.754,
           "resnet18.imagenet_megengine_quant_float"),
    _mge_q("resnet18.imagenet_megengine_quant_float_1_0", "resnet18",
           "resnet18_normal_69796.pkl", 69.796),
    _mge_q("resnet18_int8.imagenet_megengine_qat_1_0", "resnet18", "resnet18_qat_69814.pkl",
           69.814, "resnet18.imagenet_megengine_quant_float_1_0"),
    _mge_q("mobilenet_v2.imagenet_megengine_quant_float", "mobilenet_v2",
           "mobilenet_v2_normal_72808.pkl", 72.808),
    _mge_q("mobilenet_v2_int8.imagenet_megengine_qat", "mobilenet_v2",
           "mobilenet_v2_qat_71228.pkl", 71.228, "mobilenet_v2.imagenet_megengine_quant_float"),
    _mge_q("shufflenet_v1_x1_5_g3.imagenet_megengine_quant_float", "shufflenet_v1_x1_5_g3",
           "shufflenet_v1_x1_5_g3_normal_71948.pkl", 71.948, notes=_MGE_SNET_V1),
    _mge_q("shufflenet_v1_x1_5_g3_int8.imagenet_megengine_qat", "shufflenet_v1_x1_5_g3",
           "shufflenet_v1_x1_5_g3_qat_70806.pkl", 70.806,
           "shufflenet_v1_x1_5_g3.imagenet_megengine_quant_float", notes=_MGE_SNET_V1),
    WeightEntry("shufflenet_v1_x1_0_g3.imagenet_mmpretrain", "shufflenet_v1_x1_0_g3",
                (f"{MMPRETRAIN}shufflenet_v1/shufflenet_v1_batch1024_imagenet_20200804-"
                 "5d6cec73.pth",), None, "none", "torchvision", None, TV_V1,
                {"top1": 68.13, "top5": 87.81}, MMPRETRAIN_README, name_tag="5d6cec73",
                notes="MMPretrain names (backbone.*, head.fc.*); download only, no name map "
                      "yet; the hex tag is OpenMMLab's, not checked"),
    # GANs (zoo/gan/; names: gan_maps.py): FID against the train set over 50k samples (TF
    # Inception graph), IS over 10 splits
    WeightEntry("dcgan_cifar10.cifar10_megengine", "dcgan_cifar10",
                (f"{MEGENGINE}dcgan_cifar.pkl",), None, "none", "megengine", "megengine",
                GAN_PREPROCESSING, {"fid": 27.2, "is": 7.0, "kid": 0.0242},
                "MegEngine Models official/vision/gan/README.md (REFERENCE.md)",
                notes="the generator only (the README loads it into DCGANGeneratorCIFAR); "
                      "the discriminator keeps its initialisation"),
    # Inception-v3 for FID and IS (zoo/gan/inception.py; names: inception_maps.py)
    _tv("inception_v3.imagenet_torchvision", "inception_v3", "inception_v3_google", "0cc3c7bd",
        77.294, 93.45, preprocessing.TORCHVISION_INCEPTION),
    WeightEntry("fid_inception_v3.imagenet_tf2015_pytorch_fid", "fid_inception_v3",
                (f"{PYTORCH_FID}pt_inception-2015-12-05-6726825d.pth",), None, "none",
                "torchvision", "torchvision", preprocessing.PYTORCH_FID, {},
                "pytorch-fid (REFERENCE.md)", name_tag="6726825d",
                notes="the TF 2015 Inception graph FID and IS are defined on, as pytorch-fid "
                      "ported it; pytorch-fid loads it without a hash check, so the tag in "
                      "the name is not checked"),
    # Detection (zoo/detection/; names: detection_maps.py): COCO val2017 box AP
    WeightEntry("retinanet_resnet50_fpn.coco_torchvision", "retinanet_resnet50_fpn",
                (f"{TORCHVISION}retinanet_resnet50_fpn_coco-eeacb38b.pth",), "eeacb38b",
                "prefix", "torchvision", "torchvision", preprocessing.TORCHVISION_DETECTION,
                {"box_map": 36.4}, "torchvision 0.29.1 model docs (REFERENCE.md 1c)",
                notes="v1 keys (FPN and head convs renamed on load); trained with "
                      "FrozenBatchNorm2d at eps 0, which loading it sets; labels are COCO "
                      "category ids 1-90 of a 91-way head"),
    WeightEntry("fasterrcnn_resnet50_fpn.coco_torchvision", "fasterrcnn_resnet50_fpn",
                (f"{TORCHVISION}fasterrcnn_resnet50_fpn_coco-258fb6c6.pth",), "258fb6c6",
                "prefix", "torchvision", "torchvision", preprocessing.TORCHVISION_DETECTION,
                {"box_map": 37.0}, "torchvision 0.29.1 model docs (REFERENCE.md 1c)",
                notes="v1 keys (FPN and RPN head convs renamed on load); trained with "
                      "FrozenBatchNorm2d at eps 0, which loading it sets; a 91-way head whose "
                      "column 0 is the background and whose labels are COCO category ids"),
    _mge_det("retinanet_resnet50_fpn", "1x", "retinanet_res50_coco_1x_800size_36dot4_b782a619.pkl",
             36.4, "v0.5"),
    _mge_det("retinanet_resnet50_fpn", "1x_syncbn",
             "retinanet_res50_coco_1x_800size_syncbn_37dot1_35cedcdf.pkl", 37.1, "v0.5"),
    _mge_det("retinanet_resnet50_fpn", "1x_v1_0",
             "retinanet_res50_coco_1x_800size_37dot0_d1dafa1d.pkl", 37.0, "v1"),
    _mge_det("retinanet_resnet50_fpn", "3x", "retinanet_res50_coco_3x_800size_39dot3_8eaec532.pkl",
             39.3, "v1"),
    _mge_det("retinanet_resnet18_fpn", "3x", "retinanet_res18_coco_3x_800size_35dot3_0c4956c8.pkl",
             35.3, "v1"),
    _mge_det("retinanet_resnet50_fpn", "freeanchor_3x",
             "freeanchor_res50_coco_3x_800size_42dot1_5c567f14.pkl", 42.1, "v1"),
    _mge_det("retinanet_resnet18_fpn", "freeanchor_3x",
             "freeanchor_res18_coco_3x_800size_38dot1_3d0559a8.pkl", 38.1, "v1"),
    _mge_det("fasterrcnn_resnet50_fpn", "1x",
             "faster_rcnn_res50_coco_1x_800size_38dot8_5e195d80.pkl", 38.8, "v0.5"),
    _mge_det("fasterrcnn_resnet50_fpn", "1x_syncbn",
             "faster_rcnn_res50_coco_1x_800size_syncbn_39dot3_09b99bce.pkl", 39.3, "v0.5"),
    _mge_det("fasterrcnn_resnet50_fpn", "1x_v1_0",
             "faster_rcnn_res50_coco_1x_800size_38dot0_f5e2000d.pkl", 38.0, "v1"),
    _mge_det("fasterrcnn_resnet50_fpn", "3x",
             "faster_rcnn_res50_coco_3x_800size_40dot1_8682ff1a.pkl", 40.1, "v1"),
    _mge_det("fasterrcnn_resnet18_fpn", "3x",
             "faster_rcnn_res18_coco_3x_800size_35dot7_a33835ca.pkl", 35.7, "v1"),
    # Pose (zoo/keypoints/; names: keypoint_maps.py): COCO val2017 keypoint AP at 256x192,
    # person boxes of a 56.4 AP detector, flip test (REFERENCE.md, MegEngine Models' table)
    _mge_pose("simplebaseline_res50", "simplebaseline_res50_256x192_0to255_71dot1_2c0de7.pkl",
              71.2),
    _mge_pose("simplebaseline_res101", "simplebaseline_res101_256x192_0to255_71dot8_df6304.pkl",
              72.2),
    _mge_pose("simplebaseline_res152", "simplebaseline_res152_256x192_0to255_72dot3_18ba8e.pkl",
              72.4),
    _mge_pose("mspn_4stage", "mspn_4stage_0_255_75_2.pkl", 75.2),
]

_REGISTRY = {}


def register(entry, overwrite=False):
    """Add an entry (e.g. your own weights on a file server); loud on duplicates."""
    if entry.name in _REGISTRY and not overwrite:
        raise ValueError(f"weights entry {entry.name!r} is already registered")
    if entry.sha256_kind not in ("full", "prefix", "none"):
        raise ValueError(f"{entry.name}: sha256_kind must be full|prefix|none")
    _REGISTRY[entry.name] = entry
    return entry


def unregister(name):
    _REGISTRY.pop(name, None)


for _entry in ENTRIES:
    register(_entry)


def list_entries(arch=None):
    return [e for e in _REGISTRY.values() if arch is None or e.arch == arch]


def get_entry(name):
    if name not in _REGISTRY:
        close = [n for n in _REGISTRY if n.split(".")[0] == name.split(".")[0]]
        hint = f"; for this arch: {close}" if close else f"; known: {sorted(_REGISTRY)}"
        raise KeyError(f"no weights named {name!r}{hint}")
    return _REGISTRY[name]


def default_entry(arch):
    """The entry `pretrained=True` uses: the first float torchvision entry for `arch`."""
    for entry in _REGISTRY.values():
        if entry.arch == arch and entry.float_parent is None and entry.converter:
            return entry
    raise KeyError(f"no pretrained weights for arch {arch!r}")


def with_mirrors(entry, *mirrors):
    """A copy of `entry` that also tries `mirrors` (same file, other places) in order."""
    return replace(entry, urls=tuple(entry.urls) + tuple(mirrors))
