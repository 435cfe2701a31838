"""BitNet's 2-bit packed weights unpacked by transformers' own compiled function: ``unpack_weights`` is
decorated with ``@torch.compile`` in transformers.integrations.bitnet, at that module's import."""

from __future__ import annotations

import torch
from transformers.integrations.bitnet import pack_weights, unpack_weights


def packed(rows: int = 64, cols: int = 32, seed: int = 0) -> torch.Tensor:
    ternary = torch.randint(-1, 2, (rows, cols), generator=torch.Generator().manual_seed(seed))
    return pack_weights(ternary)


def dense(weights: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return unpack_weights(weights, dtype)
