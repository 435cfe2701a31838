"""Pre-norm transformer blocks over token ids; the loss compiled at import, as packages write it."""

from __future__ import annotations

import torch
from torch import nn

VOCAB, DIM, HEADS, LAYERS, SEQ, CLASSES, BATCH = 512, 64, 4, 2, 32, 4, 16


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
        attn = nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, DIM))
        return x + self.mlp(self.norm2(x))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(SEQ, DIM))
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.embed(tokens) + self.pos)
        return self.head(self.norm(x).mean(dim=1))


def make_model(seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    return Encoder()


def make_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    return tokens, torch.randint(0, CLASSES, (BATCH,), generator=generator)


def loss_fn(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(tokens), labels)


compiled_loss = torch.compile(loss_fn)  # at import: the package's only compile


class Trainer:
    """AdamW over the compiled loss, as users train; ``predict`` runs the model without compiling it."""

    def __init__(self, model: nn.Module, lr: float = 1e-3) -> None:
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def step(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = compiled_loss(self.model, tokens, labels)
        loss.backward()
        self.optimizer.step()
        return loss.detach()
