"""Pre-norm transformer blocks (d_model 1024, 16 heads, GELU MLP) under bf16 autocast, on CUDA.

``GPU_BLOCK_COMPILE_MODE`` picks torch.compile's mode ("max-autotune", ...) for the build's
workload and the program alike: a wheel built in one mode serves programs that use that mode.
"""

from __future__ import annotations

import os

import torch
from torch import nn

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 8192, 1024, 16, 2, 1024, 8


def compile_mode() -> str | None:
    return os.environ.get("GPU_BLOCK_COMPILE_MODE") or None


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        attn = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, DIM))
        return x + self.mlp(self.norm2(x))


class LanguageModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(SEQ, DIM))
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.embed(tokens) + self.pos)))


def make_model(seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel().cuda()


def make_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=generator).cuda()
    return tokens[:, :-1], tokens[:, 1:]


class Trainer:
    def __init__(self, model: nn.Module, lr: float = 3e-4) -> None:
        self.model = model
        self.compiled = torch.compile(model, mode=compile_mode())
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)

    def step(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = self.compiled(tokens)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    @torch.no_grad()
    def predict(self, tokens: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.compiled(tokens)
