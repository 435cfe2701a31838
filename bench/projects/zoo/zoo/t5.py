"""transformers' T5 encoder-decoder, a tiny config, compiled as a module by the package."""

import torch
from transformers import T5Config, T5ForConditionalGeneration

from zoo import compiled

VOCAB = 1024


def make_model():
    torch.manual_seed(0)
    return T5ForConditionalGeneration(T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=256, num_layers=2,
                                               num_heads=4, dropout_rate=0.0, decoder_start_token_id=0))


def make_batch():
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (4, 32), generator=generator), torch.randint(0, VOCAB, (4, 16), generator=generator)


def train_step(model, batch, optimizer):
    ids, labels = batch
    return compiled.train_step(model, optimizer, input_ids=ids, labels=labels)


def infer(model, batch):
    ids, labels = batch
    return compiled.module(model)(input_ids=ids, decoder_input_ids=labels).logits
