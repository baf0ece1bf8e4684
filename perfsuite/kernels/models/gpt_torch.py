"""A GPT-2-style decoder-only language model in ``torch.nn``, at the shapes of the catalogue
(``catalogue.MODELS``: ``gpt-tiny``, ``gpt2-small``): token and position embeddings, pre-norm
blocks of causal self-attention and a 4x GELU MLP, a final LayerNorm and a head tied to the
token embedding, initialised as GPT-2 is (normal 0.02, residual projections scaled by
1/sqrt(2 n_layer)). Nothing is downloaded: no weights, no tokenizer.

The model is a definition; the loop that trains it, its yardstick, summary and stalls are the
shared training loop's (``torch_epoch``, ``training``). Its FLOP count per token is the catalogue's
(``catalogue.flops_per_token``), as torchtitan counts it, for MFU. ``blocks()`` are the units FSDP shards one by one.

The functions take the imported ``torch`` module: this file imports nothing heavy, so the
pytest side can count FLOPs without torch.
"""
from __future__ import annotations

import functools
import math
from typing import Any

from .catalogue import LmShape, model_spec, zipf_tokens


@functools.lru_cache(maxsize=None)
def _classes(torch: Any):
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self, s: LmShape):
            super().__init__()
            self.n_head = s.n_head
            self.c_attn = nn.Linear(s.d_model, 3 * s.d_model)
            self.c_proj = nn.Linear(s.d_model, s.d_model)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class Block(nn.Module):
        def __init__(self, s: LmShape):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(s.d_model), Attention(s)
            self.ln_2 = nn.LayerNorm(s.d_model)
            self.mlp = nn.Sequential(nn.Linear(s.d_model, 4 * s.d_model), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * s.d_model, s.d_model))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, s: LmShape, seq_len: int):
            super().__init__()
            self.shape, self.seq_len = s, seq_len
            self.wte = nn.Embedding(s.vocab, s.d_model)
            self.wpe = nn.Embedding(seq_len, s.d_model)
            self.h = nn.ModuleList(Block(s) for _ in range(s.n_layer))
            self.ln_f = nn.LayerNorm(s.d_model)
            self.lm_head = nn.Linear(s.d_model, s.vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2's
            self.apply(self._init)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * s.n_layer))

        @staticmethod
        def _init(m):
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

        def blocks(self) -> list:
            return list(self.h)

        def position_params(self) -> int:
            return self.wpe.weight.numel()

    return GPT


def build_gpt(torch: Any, name: str, seq_len: int):
    """A fresh GPT of the catalogue's ``name`` for sequences of up to ``seq_len`` tokens."""
    spec = model_spec(name)
    return _classes(torch)(spec.lm, seq_len)


def lm_loss(torch: Any):
    """Next-token cross-entropy on (batch, seq, vocab) logits, computed in float32 whatever the
    logits' precision (as torchtitan does under bf16)."""
    F = torch.nn.functional

    def loss(logits, targets):
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    return loss


def synthetic_tokens(torch: Any, batch: int, seq_len: int, vocab: int, seed: int, device: Any = None):
    """One in-memory batch reused every step: (inputs, next-token targets), each batch x seq_len
    (``zipf_tokens``)."""
    t = torch.from_numpy(zipf_tokens(batch, seq_len, vocab, seed))
    return t[:, :-1].contiguous().to(device or "cpu"), t[:, 1:].contiguous().to(device or "cpu")
