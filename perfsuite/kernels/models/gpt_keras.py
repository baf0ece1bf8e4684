"""The GPT-2-style language models of the catalogue (``catalogue.MODELS``: ``gpt-tiny``,
``gpt2-small``) in Keras, layer for layer as ``gpt.py`` builds them in ``torch.nn``: token and
position embeddings, pre-norm blocks of causal self-attention (one fused q/k/v projection, as
GPT-2's ``c_attn``) and a 4x GELU (tanh) MLP, a final LayerNormalization, and a head tied to the
token embedding (the head's matmul reads the embedding's own variable, so the parameter count is
the torch model's). Initialised as GPT-2 is: normal 0.02, residual projections scaled by
1/sqrt(2 n_layer), LayerNorm epsilon 1e-5 (torch's, not Keras' 1e-3).

The classes are made from the ``keras`` that ``tf.keras`` is in this rank (Keras 3, or tf_keras
where Horovod set TF_USE_LEGACY_KERAS), and use TensorFlow ops only, so one definition serves
both. Every layer is named: Horovod matches tensors across ranks by name, and auto names count
the layers built so far in the process (see ``keras_models.build_model``).

The model is a definition; its FLOPs per token are ``catalogue.flops_per_token``'s and its batch is
``catalogue.zipf_tokens``' draw, so a TensorFlow and a PyTorch tokens/s are of one model and one batch.
"""
from __future__ import annotations

import functools
import math
from typing import Any

from .catalogue import LmShape, flops_per_token, model_spec, zipf_tokens

ARCHITECTURE = "GPT-2 decoder in Keras, {n_layer} blocks x {d_model}, {n_head} heads, vocab {vocab}, tied head"
INIT_STD = 0.02
LN_EPSILON = 1e-5  # torch.nn.LayerNorm's


@functools.lru_cache(maxsize=None)
def _classes(tf: Any, keras: Any):
    layers = keras.layers

    def normal(std: float):
        # A fresh initializer per layer: Keras 3 warns that one unseeded instance called twice
        # gives the same values twice.
        return keras.initializers.RandomNormal(stddev=std)

    def dense(units: int, name: str, std: float = INIT_STD):
        return layers.Dense(units, kernel_initializer=normal(std), bias_initializer="zeros", name=name)

    class CausalSelfAttention(layers.Layer):
        def __init__(self, s: LmShape, resid_std: float, **kw):
            super().__init__(**kw)
            self.n_head, self.d_model = s.n_head, s.d_model
            self.c_attn = dense(3 * s.d_model, "c_attn")
            self.c_proj = dense(s.d_model, "c_proj", resid_std)

        def call(self, x):
            b, t = tf.shape(x)[0], tf.shape(x)[1]
            head_dim = self.d_model // self.n_head

            def heads(z):  # (b, t, d) -> (b, heads, t, head_dim)
                return tf.transpose(tf.reshape(z, [b, t, self.n_head, head_dim]), [0, 2, 1, 3])

            q, k, v = (heads(z) for z in tf.split(self.c_attn(x), 3, axis=-1))
            scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(head_dim))
            causal = tf.linalg.band_part(tf.ones([t, t], dtype=tf.bool), -1, 0)  # token i sees 0..i
            scores = tf.where(causal, scores, tf.fill(tf.shape(scores), scores.dtype.min))
            y = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
            return self.c_proj(tf.reshape(tf.transpose(y, [0, 2, 1, 3]), [b, t, self.d_model]))

    class Block(layers.Layer):
        def __init__(self, s: LmShape, **kw):
            super().__init__(**kw)
            resid_std = INIT_STD / math.sqrt(2 * s.n_layer)
            self.ln_1 = layers.LayerNormalization(epsilon=LN_EPSILON, name="ln_1")
            self.attn = CausalSelfAttention(s, resid_std, name="attn")
            self.ln_2 = layers.LayerNormalization(epsilon=LN_EPSILON, name="ln_2")
            self.mlp_fc = dense(4 * s.d_model, "mlp_fc")
            self.mlp_proj = dense(s.d_model, "mlp_proj", resid_std)

        def call(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp_proj(tf.nn.gelu(self.mlp_fc(self.ln_2(x)), approximate=True))

    class GPT(keras.Model):
        def __init__(self, s: LmShape, seq_len: int, **kw):
            super().__init__(**kw)
            self.lm_shape, self.seq_len = s, seq_len
            self.wte = layers.Embedding(s.vocab, s.d_model, embeddings_initializer=normal(INIT_STD), name="wte")
            self.wpe = layers.Embedding(seq_len, s.d_model, embeddings_initializer=normal(INIT_STD), name="wpe")
            self.h = [Block(s, name=f"h{i}") for i in range(s.n_layer)]
            self.ln_f = layers.LayerNormalization(epsilon=LN_EPSILON, name="ln_f")

        def call(self, idx):
            x = self.wte(idx) + self.wpe(tf.range(tf.shape(idx)[1]))
            for block in self.h:
                x = block(x)
            # The head tied to the token embedding, as GPT-2's: logits = h @ wte^T, no bias.
            return tf.matmul(self.ln_f(x), self.wte.embeddings, transpose_b=True)

        def position_params(self) -> int:
            return self.seq_len * self.lm_shape.d_model

    return GPT


def build_gpt(tf: Any, name: str, seq_len: int):
    """A fresh GPT of the catalogue's ``name`` for sequences of up to ``seq_len`` tokens, its
    variables made (one forward on a dummy batch), so a transport can broadcast or mirror them."""
    spec = model_spec(name)
    model = _classes(tf, tf.keras)(spec.lm, seq_len, name=spec.name.replace("-", "_"))
    model(tf.zeros([1, seq_len], tf.int32))
    return model


def architecture(name: str) -> str:
    s = model_spec(name).lm
    return ARCHITECTURE.format(n_layer=s.n_layer, d_model=s.d_model, n_head=s.n_head, vocab=s.vocab)


def lm_loss(tf: Any):
    """Next-token cross-entropy per token, (batch, seq) from (batch, seq, vocab) logits, computed
    in float32 whatever the logits' precision; the transports average it (``reduction="none"``,
    as the image models' loss)."""
    sce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def loss(targets, logits):
        return sce(targets, tf.cast(logits, tf.float32))

    return loss


def synthetic_tokens(tf: Any, batch: int, seq_len: int, vocab: int, seed: int):
    """One in-memory batch reused every step: (inputs, next-token targets), int32, each
    batch x seq_len, the same draw as torch's (``catalogue.zipf_tokens``)."""
    tokens = zipf_tokens(batch, seq_len, vocab, seed).astype("int32")
    return tf.constant(tokens[:, :-1]), tf.constant(tokens[:, 1:])


def lm_facts(model: Any, name: str, seq_len: int, params: int) -> dict[str, Any]:
    """What a result names of a language model: its sequence, vocabulary, FLOPs per token (for
    MFU, counted as torch's model is) and architecture."""
    spec = model_spec(name)
    return {"seq_len": seq_len, "vocab": spec.lm.vocab, "architecture": architecture(name),
            "flops_per_token": flops_per_token(params, model.position_params(), spec.lm, seq_len)}
