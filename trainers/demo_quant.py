"""The int8 half of `make demo`: post-training calibration, a short QAT fine-tune, the
conversion to int8, and the float / PTQ / QAT comparison table (accuracy, latency, size)."""
import time

import numpy as np

import tianyuan as ty
from tianyuan import quantization as Q


def ptq(model, images, to_input, batches=32, batch_size=64):
    """Post-training quantization: histogram-calibrate on `batches` training batches."""
    qat = Q.quantize_qat(model, Q.calibration_qconfig)
    Q.calibrate(qat, (to_input(images[i:i + batch_size])
                      for i in range(0, batches * batch_size, batch_size)))
    return Q.quantize(qat)


def qat_finetune(model, images, labels, train, epochs=1, lr=0.005, batch_size=64, seed=1):
    """Quantization-aware fine-tune (EMA observers, STE) with the float loop, then int8."""
    qat = Q.quantize_qat(model, Q.ema_fakequant_qconfig)
    train(qat, images, labels, epochs, batch_size, lr, seed)
    return qat, Q.quantize(qat)


def latency_ms(model, example, repeats):
    """Median wall time of `model(example)` in milliseconds (after one warm-up call)."""
    model.eval()
    times = []
    with ty.no_grad():
        model(example)
        for _ in range(repeats):
            start = time.perf_counter()
            model(example)
            times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def state_bytes(model):
    """Bytes of the saved state (float32 weights, or int8 weights + float bias and scales)."""
    return sum(v.nbytes for v in model.state_dict().values())


def compare(models, accuracy, test_images, to_input):
    """{name: row} with accuracy, drop vs float, latency at batch 1 / 16 and size."""
    rows = {}
    for name, model in models.items():
        acc = accuracy(model)
        rows[name] = {
            "accuracy": acc,
            "drop": 100 * (rows["float"]["accuracy"] - acc) if rows else 0.0,
            "ms_batch1": latency_ms(model, to_input(test_images[:1]), 30),
            "ms_batch16": latency_ms(model, to_input(test_images[:16]), 10),
            "bytes": state_bytes(model)}
    return rows


def print_table(rows):
    print(f"\n{'model':<10}{'accuracy':>10}{'drop':>9}{'ms @1':>9}{'ms @16':>9}{'size KB':>10}")
    print("-" * 57)
    for name, r in rows.items():
        print(f"{name:<10}{100 * r['accuracy']:>9.2f}%{r['drop']:>8.2f}p{r['ms_batch1']:>9.2f}"
              f"{r['ms_batch16']:>9.2f}{r['bytes'] / 1024:>10.1f}")
    f, q = rows["float"], rows["QAT int8"]
    print(f"int8 vs float: {f['ms_batch1'] / q['ms_batch1']:.2f}x at batch 1, "
          f"{f['ms_batch16'] / q['ms_batch16']:.2f}x at batch 16, "
          f"{f['bytes'] / q['bytes']:.1f}x smaller")
