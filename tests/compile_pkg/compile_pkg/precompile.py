"""The build's workload: train with AdamW through the compiled loss, take features it never
differentiates, infer, scale, double, classify, run a module whose forward is decorated, summarize,
scale by a local function's cache, and each way of compiling compile_pkg/styles.py holds."""

import torch
import torch.nn.functional as F

from compile_pkg import styles
from compile_pkg.model import (
    batch,
    cached,
    classifier,
    compiled_features,
    compiled_loss,
    decorated,
    doubled,
    make,
    normalized,
    predictor,
    scaled,
    summary,
)


def workload() -> None:
    model = make()
    optimizer = torch.optim.AdamW(model.parameters())
    x, y = batch()
    for _ in range(2):
        optimizer.zero_grad()
        compiled_loss(model, x, y).backward()
        optimizer.step()
    compiled_features(model, x)
    with torch.no_grad():
        predictor(model.eval())(x)
        predictor(make().train())(x)  # the same forward compiled again: both compiles are served
    scaled(torch.ones(32))(x)
    normalized(x)
    doubled(F.softsign)(x)
    classifier()(x, y).backward()
    decorated()(x).sum().backward()
    summary(x)
    cached(x)
    styles.trained_by_compiled_step()
    styles.self_compiled()(x).sum().backward()
    styles.regional()(x)
    styles.library_regional()(x)
    rows = x.clone()
    torch._dynamo.mark_dynamic(rows, 0)
    styles.dynamic_rows(rows)
    styles.aot_eager_shifted(x)
    styles.compiled_numpy_scaled(x)
