"""Load on a running `df11 serve`: for each concurrency, that many streaming clients, each sending
`--requests` chat requests one after the other (random prompts, greedy, `--max-tokens` each).
Prints one JSON line per concurrency: total generated tokens per second, requests per second,
p50 latency, and the time to first token (request arrival to first token sampled) from the
server's /metrics histogram over that level's requests: p50 and p99 interpolated in its buckets,
and the mean. Standard library only (no openai package needed).

    python3 scripts/serve-bench.py http://127.0.0.1:8000 --model NAME --concurrency 1 8 32
"""
import argparse
import json
import random
import statistics
import threading
import time
import urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("url")
parser.add_argument("--model", required=True)
parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
parser.add_argument("--requests", type=int, default=4, help="requests per client")
parser.add_argument("--max-tokens", type=int, default=128)
parser.add_argument("--prompt-words", type=int, default=64)
args = parser.parse_args()
WORDS = "tree graph node edge root leaf branch weight matrix vector tensor model token".split()


def ttft_histogram():
    """(bucket bounds, cumulative counts, sum, count) of the server's TTFT histogram."""
    text = urllib.request.urlopen(args.url + "/metrics", timeout=30).read().decode()
    bounds, counts, total, count = [], [], 0.0, 0
    for line in text.splitlines():
        if line.startswith("df11_time_to_first_token_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            bounds.append(float("inf") if le == "+Inf" else float(le))
            counts.append(int(line.split()[-1]))
        elif line.startswith("df11_time_to_first_token_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("df11_time_to_first_token_seconds_count"):
            count = int(line.split()[-1])
    return bounds, counts, total, count


def quantile(bounds, counts, q):
    """The q-quantile of a cumulative histogram, linear within its bucket."""
    n = counts[-1]
    if n == 0:
        return float("nan")
    rank, lower, below = q * n, 0.0, 0
    for le, c in zip(bounds, counts):
        if c >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(c - below, 1)
        lower, below = le, c
    return lower


def one(rng):
    prompt = " ".join(rng.choice(WORDS) for _ in range(args.prompt_words))
    body = json.dumps({"model": args.model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(args.url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    tokens = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return None, time.time() - t0, tokens


for c in args.concurrency:
    results, lock = [], threading.Lock()

    def client(i):
        rng = random.Random(1000 * c + i)
        for _ in range(args.requests):
            r = one(rng)
            with lock:
                results.append(r)

    before = ttft_histogram()
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    after = ttft_histogram()
    counts = [a - b for a, b in zip(after[1], before[1])]
    n = after[3] - before[3]
    print(json.dumps({
        "concurrency": c, "requests": len(results), "wall_s": round(wall, 2),
        "generated_tok_s": round(sum(r[2] for r in results) / wall, 1),
        "requests_per_s": round(len(results) / wall, 2),
        "ttft_p50_ms": round(1e3 * quantile(after[0], counts, 0.5), 1),
        "ttft_p99_ms": round(1e3 * quantile(after[0], counts, 0.99), 1),
        "ttft_mean_ms": round(1e3 * (after[2] - before[2]) / max(n, 1), 1),
        "latency_p50_s": round(statistics.median(r[1] for r in results), 3),
    }), flush=True)
