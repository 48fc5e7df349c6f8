#!/usr/bin/env python3
"""Reference vectors of all-MiniLM-L6-v2 for tests/data/minilm-reference.json.

An independent implementation of the model in float64 numpy (BERT, exact GELU, mean pooling
over the tokens, unit length), reading the same checkpoint and tokenizer files that Memex
installs. The Rust encoder is held to these vectors (tests/vectors.rs).

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install numpy tokenizers
    /tmp/ref/bin/python scripts/minilm-reference.py ~/.cache/memex/models/all-MiniLM-L6-v2 \
        > tests/data/minilm-reference.json
"""

import json
import math
import struct
import sys

import numpy as np
from tokenizers import Tokenizer

TEXTS = [
    "where did we fix the flaky timezone test",
    "The deploy failed because the migration locked the table.",
    "cargo test -p memex-rs --lib embed::int8 -- --nocapture",
    "修复了时区相关的测试",
    "x",
    "The deploy failed because the migration locked the table. " * 30,
]


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"]).astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def embed(t, cfg, ids):
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    eps = cfg["layer_norm_eps"]
    n = len(ids)
    x = (
        t["embeddings.word_embeddings.weight"][ids]
        + t["embeddings.position_embeddings.weight"][:n]
        + t["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    hd = h // heads
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def dense(name, v):
            return v @ t[p + name + ".weight"].T + t[p + name + ".bias"]

        q = dense("attention.self.query", x).reshape(n, heads, hd).transpose(1, 0, 2)
        k = dense("attention.self.key", x).reshape(n, heads, hd).transpose(1, 0, 2)
        v = dense("attention.self.value", x).reshape(n, heads, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, h)
        x = layer_norm(
            dense("attention.output.dense", ctx) + x,
            t[p + "attention.output.LayerNorm.weight"],
            t[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        up = gelu(dense("intermediate.dense", x))
        x = layer_norm(
            dense("output.dense", up) + x,
            t[p + "output.LayerNorm.weight"],
            t[p + "output.LayerNorm.bias"],
            eps,
        )
    mean = x.mean(0)
    return mean / np.linalg.norm(mean)


def main():
    folder = sys.argv[1]
    cfg = json.load(open(f"{folder}/config.json"))
    t = tensors(f"{folder}/model.safetensors")
    tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
    tok.no_padding()
    tok.no_truncation()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    out = []
    for text in TEXTS:
        ids = [cls] + tok.encode(text, add_special_tokens=False).ids[:254] + [sep]
        vec = embed(t, cfg, ids)
        out.append({"text": text, "tokens": len(ids), "vector": [round(float(v), 7) for v in vec]})
    # One text per line.
    lines = [json.dumps(o, ensure_ascii=False) for o in out]
    sys.stdout.write("[\n" + ",\n".join(lines) + "\n]\n")


if __name__ == "__main__":
    main()
