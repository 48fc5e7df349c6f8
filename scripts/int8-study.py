#!/usr/bin/env python3
"""Where all-MiniLM-L6-v2 loses precision in 8-bit integers, and what each remedy would buy.

Simulates, in float64 numpy, the quantization `memex-rs/embed/src/int8.rs` performs (weights
per output row, symmetric to ±127; each token's inputs from its minimum to its maximum with a
zero point) and variants of it, then prints the cosine of each variant's vector with the
float vector, for the reference texts of tests/data/minilm-reference.json and for held-out
texts taken from the Claude Code fixtures (the first half of those calibrates the variants
that need activation statistics; the second half is scored).

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install numpy scipy tokenizers
    /tmp/ref/bin/python scripts/int8-study.py ~/.cache/memex/models/all-MiniLM-L6-v2 \\
        ../shared/fixtures/claude
"""

import glob
import importlib.util
import json
import math
import os
import random
import sys

import numpy as np
from scipy.special import erf
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("ref", os.path.join(HERE, "minilm-reference.py"))
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)

LINEAR = [
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
]


def q_weights(w, group=None):
    """Symmetric int8 per output row (or per `group` inputs of a row), back in floats."""
    out = np.empty_like(w)
    step = group or w.shape[1]
    for j in range(0, w.shape[1], step):
        b = w[:, j : j + step]
        s = np.abs(b).max(1, keepdims=True) / 127
        s[s == 0] = 1
        out[:, j : j + step] = np.clip(np.round(b / s), -127, 127) * s
    return out


def q_inputs(x, group=None):
    """Unsigned 8-bit per token (or per `group` inputs) from minimum to maximum, 0 included."""
    out = np.empty_like(x)
    step = group or x.shape[1]
    for j in range(0, x.shape[1], step):
        b = x[:, j : j + step]
        lo = np.minimum(b.min(1, keepdims=True), 0)
        hi = np.maximum(b.max(1, keepdims=True), 0)
        s = (hi - lo) / 255
        s[s == 0] = 1
        z = np.clip(np.round(-lo / s), 0, 255)
        out[:, j : j + step] = (np.clip(np.round(b / s + z), 0, 255) - z) * s
    return out


class Model:
    def __init__(self, folder):
        self.cfg = json.load(open(f"{folder}/config.json"))
        self.t = ref.tensors(f"{folder}/model.safetensors")
        self.tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
        self.tok.no_padding()
        self.tok.no_truncation()
        self.stats = {}

    def ids(self, text):
        cls, sep = self.tok.token_to_id("[CLS]"), self.tok.token_to_id("[SEP]")
        return [cls] + self.tok.encode(text, add_special_tokens=False).ids[:254] + [sep]

    def embed(self, text, v=None, record=False):
        """`v`: the variant (None: float); `record`: keep each layer's input maxima."""
        t, cfg = self.t, self.cfg
        ids = self.ids(text)
        h, heads, eps, n = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"], len(ids)
        x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:n]
        x = ref.layer_norm(x + t["embeddings.token_type_embeddings.weight"][0], t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
        hd = h // heads
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."

            def dense(name, a):
                w, b = t[p + name + ".weight"], t[p + name + ".bias"]
                if record:
                    self.stats.setdefault((i, name), []).append(np.abs(a).max(0))
                if v is None or (i, name) in v.get("float", ()):
                    return a @ w.T + b
                g = v.get("group")
                qw = (lambda m: m) if v.get("float_weights") else (lambda m: q_weights(m, g))
                qx = (lambda m: m) if v.get("float_inputs") else (lambda m: q_inputs(m, g))
                outliers = v.get("outliers", {}).get((i, name))
                if outliers is None or len(outliers) == 0:
                    return qx(a) @ qw(w).T + b
                rest = a.copy()
                rest[:, outliers] = 0
                return qx(rest) @ qw(w).T + a[:, outliers] @ w[:, outliers].T + b

            def heads_of(y):
                return y.reshape(n, heads, hd).transpose(1, 0, 2)

            q, k, val = (heads_of(dense(f"attention.self.{s}", x)) for s in ("query", "key", "value"))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ val).transpose(1, 0, 2).reshape(n, h)
            x = ref.layer_norm(dense("attention.output.dense", ctx) + x, t[p + "attention.output.LayerNorm.weight"], t[p + "attention.output.LayerNorm.bias"], eps)
            up = dense("intermediate.dense", x)
            up = 0.5 * up * (1.0 + erf(up / math.sqrt(2.0)))
            x = ref.layer_norm(dense("output.dense", up) + x, t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"], eps)
        m = x.mean(0)
        return m / np.linalg.norm(m)

    def outliers(self, times):
        """Per layer, the input channels whose largest value is `times` the layer's median."""
        out = {}
        for key, maxima in self.stats.items():
            a = np.max(maxima, 0)
            out[key] = np.where(a > times * np.median(a))[0]
        return out


def fixture_texts(root, count=60):
    texts = []
    for f in sorted(glob.glob(f"{root}/**/*.jsonl", recursive=True))[:20]:
        for line in open(f, errors="replace"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            m = d.get("message") if isinstance(d, dict) else None
            c = m.get("content") if isinstance(m, dict) else None
            parts = [c] if isinstance(c, str) else [b.get("text") for b in c or [] if isinstance(b, dict) and b.get("type") == "text"]
            texts += [p for p in parts if isinstance(p, str) and 10 < len(p) < 600]
    random.Random(7).shuffle(texts)
    return texts[:count]


def main():
    model = Model(sys.argv[1])
    texts = fixture_texts(sys.argv[2])
    calib, held = texts[: len(texts) // 2], texts[len(texts) // 2 :]
    reference = [d["text"] for d in json.load(open(os.path.join(HERE, "..", "tests", "data", "minilm-reference.json")))]
    for text in calib:
        model.embed(text, record=True)
    exact = {text: model.embed(text) for text in reference + held}
    every = {(i, n) for i in range(model.cfg["num_hidden_layers"]) for n in LINEAR}
    value = {(i, "attention.self.value") for i in range(model.cfg["num_hidden_layers"])}
    variants = [
        ("int8 as built (per row, per token)", {}),
        ("weights in int8 only", {"float_inputs": True}),
        ("inputs in int8 only", {"float_weights": True}),
        ("both in groups of 64 inputs", {"group": 64}),
        ("outlier inputs (>4x median) in f32", {"outliers": model.outliers(4)}),
        ("value projection in f32", {"float": value}),
        ("value in f32 + outliers >4x in f32", {"float": value, "outliers": model.outliers(4)}),
    ]
    variants += [(f"only {n} in int8", {"float": every - {(i, n) for i in range(6)}}) for n in LINEAR]
    print(f"{'variant':42s} reference texts: min, each          held-out: min  median")
    for name, v in variants:
        r = [float(exact[t] @ model.embed(t, v)) for t in reference]
        h = [float(exact[t] @ model.embed(t, v)) for t in held]
        print(f"{name:42s} {min(r):.5f} ({' '.join(f'{c:.4f}' for c in r)})  {min(h):.5f} {np.median(h):.5f}", flush=True)


if __name__ == "__main__":
    main()
