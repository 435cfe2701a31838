"""transformers' BERT for sequence classification from a config (the model and batch of bert_function and
bert_module)."""

import torch
from transformers import BertConfig, BertForSequenceClassification

VOCAB, LENGTH, BATCH, LABELS = 2048, 32, 4, 3


def make_model():
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
        max_position_embeddings=LENGTH, num_labels=LABELS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def make_batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=generator)
    return ids, torch.ones(BATCH, LENGTH, dtype=torch.long), torch.randint(0, LABELS, (BATCH,), generator=generator)

