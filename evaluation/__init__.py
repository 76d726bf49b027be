"""Metrics, quantization reports and speed/memory measurement."""

from .benchmark import benchmark, compare_latency
from .classification import (ClassificationEvaluator, card_preprocessing, eval_transform,
                             evaluate_classification, topk_correct)
from .detection import COCOEvaluator
from .evaluator import Evaluator, inference
from .gan import GANEvaluator
from .keypoints import (KeypointEvaluator, flip_back, flip_test, get_final_preds, get_max_preds,
                        oks_nms)
from .report import format_table, write_json
from .quant_report import QuantReport, sensitivity, sqnr_db
