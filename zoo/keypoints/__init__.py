"""Top-down human pose models (float, QAT-ready): SimpleBaseline and MSPN, their heatmap
losses, registered in the zoo with task "keypoints".

>>> from tianyuan.zoo import list_models
>>> list_models(task="keypoints")[:3]
['mspn_2stage', 'mspn_4stage', 'mspn_small']
"""
from .common import keypoint_card
from .losses import coarse_to_fine_targets, joints_mse_loss, mspn_loss, ohkm_loss
from .mspn import MSPN, mspn_2stage, mspn_4stage, mspn_small
from .simplebaseline import (SimpleBaseline, simplebaseline_res18, simplebaseline_res50,
                             simplebaseline_res101, simplebaseline_res152, simplebaseline_small)
