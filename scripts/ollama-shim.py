#!/usr/bin/env python3
"""A small Ollama-protocol shim in front of an OpenAI-compatible server (llama.cpp's
llama-server), so that Memex's `ollama` provider can be run against a real model here: no real
Ollama exists in the package registries this machine reaches.

Serves POST /api/chat (NDJSON when "stream" is true, one JSON object otherwise), GET /api/tags.
"""
import argparse
import json
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def upstream_chat(base, body, stream):
    req = {
        "model": body.get("model", "local"),
        "messages": body.get("messages", []),
        "max_tokens": body.get("options", {}).get("num_predict", 256),
        "temperature": body.get("options", {}).get("temperature", 0.2),
        "stream": stream,
    }
    if stream:
        req["stream_options"] = {"include_usage": True}
    # Ollama's `format`: "json", or a JSON Schema the output must follow (Ollama enforces it;
    # llama-server does the same from response_format).
    fmt = body.get("format")
    if fmt == "json":
        req["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        req["response_format"] = {"type": "json_schema",
                                  "json_schema": {"name": "answer", "schema": fmt}}
    r = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(req).encode(),
                               headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(r, timeout=600)


class Handler(BaseHTTPRequestHandler):
    upstream = ""

    def log_message(self, *a):
        pass

    def reply(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/api/tags":
            self.reply(200, {"models": [{"name": "gemma-3-270m", "model": "gemma-3-270m"}]})
        else:
            self.reply(404, {"error": "not found"})

    def do_POST(self):
        if self.path != "/api/chat":
            return self.reply(404, {"error": "not found"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        model = body.get("model", "local")
        if not body.get("stream", True):
            with upstream_chat(self.upstream, body, False) as r:
                v = json.load(r)
            return self.reply(200, {
                "model": model, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "message": {"role": "assistant", "content": v["choices"][0]["message"]["content"]},
                "done": True, "done_reason": "stop",
                "prompt_eval_count": v.get("usage", {}).get("prompt_tokens", 0),
                "eval_count": v.get("usage", {}).get("completion_tokens", 0),
            })
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        usage = {}
        with upstream_chat(self.upstream, body, True) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                usage = ev.get("usage") or usage
                for ch in ev.get("choices", []):
                    delta = ch.get("delta", {}).get("content")
                    if delta:
                        self.wfile.write((json.dumps({"model": model, "message": {
                            "role": "assistant", "content": delta}, "done": False}) + "\n").encode())
                        self.wfile.flush()
        self.wfile.write((json.dumps({
            "model": model, "message": {"role": "assistant", "content": ""}, "done": True,
            "prompt_eval_count": usage.get("prompt_tokens", 0),
            "eval_count": usage.get("completion_tokens", 0)}) + "\n").encode())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True)
    a = p.parse_args()
    Handler.upstream = a.upstream.rstrip("/")
    ThreadingHTTPServer(("127.0.0.1", a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
