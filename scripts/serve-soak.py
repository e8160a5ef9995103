"""A soak of a running `df11 serve`: `--concurrency` streaming clients send chat requests one after
the other for `--seconds` (random prompts, greedy, 16-256 tokens each). Counts the requests that
finished (a usage chunk and [DONE]) and every error (HTTP status, connection, malformed stream),
and prints one JSON line. Exit status 1 on any error. Standard library only.

    python3 scripts/serve-soak.py http://127.0.0.1:8000 --model NAME --seconds 600
"""
import argparse
import json
import random
import threading
import time
import urllib.error
import urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("url")
parser.add_argument("--model", required=True)
parser.add_argument("--seconds", type=float, default=600)
parser.add_argument("--concurrency", type=int, default=16)
args = parser.parse_args()
WORDS = "the of and a to in is you that it he was for on are as with his they at be this from".split()
lock = threading.Lock()
stats = {"ok": 0, "errors": 0, "tokens": 0, "first_errors": []}
deadline = time.time() + args.seconds


def one(rng):
    body = json.dumps({"model": args.model,
                       "messages": [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 200)))}],
                       "max_tokens": rng.randint(16, 256), "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(args.url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    usage, done = None, False
    with urllib.request.urlopen(req, timeout=300) as r:
        for raw in r:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
    if not (done and usage):
        raise RuntimeError("stream ended without usage and [DONE]")
    return usage["completion_tokens"]


def client(i):
    rng = random.Random(i)
    while time.time() < deadline:
        try:
            n = one(rng)
            with lock:
                stats["ok"] += 1
                stats["tokens"] += n
        except (urllib.error.URLError, OSError, ValueError, RuntimeError) as e:
            with lock:
                stats["errors"] += 1
                if len(stats["first_errors"]) < 5:
                    stats["first_errors"].append(repr(e))


t0 = time.time()
threads = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.time() - t0
print(json.dumps({"seconds": round(wall, 1), "concurrency": args.concurrency, "requests_ok": stats["ok"],
                  "errors": stats["errors"], "generated_tokens": stats["tokens"],
                  "generated_tok_s": round(stats["tokens"] / wall, 1), "first_errors": stats["first_errors"]}),
      flush=True)
raise SystemExit(1 if stats["errors"] else 0)
