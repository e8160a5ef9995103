"""Drives a running `df11 serve` with the real `openai` client (and raw HTTP for bad requests).

Usage: openai_client.py MAIN_URL LIMITED_URL EXPECTED_JSON
  MAIN_URL     a server of the fixture model, served as `tiny`, context 256, batch 8, no key
  LIMITED_URL  the same model with --max-batch 1 --max-queue 1 --api-key secret
  EXPECTED     {"prompts": [...], "texts": [...], "tokens": [...]}: the CLI's greedy output of
               each prompt (12 tokens), run alone
Prints a `LOAD {...}` line with the load test's figures. Exits non-zero on any failure.
"""
import json
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai

MAIN, LIMITED, EXPECTED = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
MODEL = "tiny"
client = openai.OpenAI(base_url=MAIN + "/v1", api_key="unused", max_retries=0)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def chat(prompt, **kw):
    args = {"temperature": 0, "max_tokens": 12, **kw}
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], **args)


def raw(url, path, body, headers=None, method="POST"):
    """Status and parsed body of one HTTP request."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def healthy(url):
    status, body = raw(url, "/health", None, method="GET")
    check(status == 200 and body == {"status": "ok"}, f"/health: {status} {body}")


# The model list.
check([m.id for m in client.models.list().data] == [MODEL], "/v1/models")

# Non-streaming and streaming chat equal the CLI's greedy output of the same prompt.
for prompt, text, tokens in zip(EXPECTED["prompts"], EXPECTED["texts"], EXPECTED["tokens"]):
    r = chat(prompt)
    check(r.choices[0].message.content == text, f"chat {prompt!r}: {r.choices[0].message.content!r} != {text!r}")
    check(r.usage.completion_tokens == len(tokens), f"usage {r.usage}")
    check(r.choices[0].finish_reason in ("length", "stop"), "finish_reason")
    parts, finish, usage = [], None, None
    for chunk in chat(prompt, stream=True, stream_options={"include_usage": True}):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    check("".join(parts) == text, f"stream {prompt!r}: {''.join(parts)!r}")
    check(finish == r.choices[0].finish_reason and usage.completion_tokens == len(tokens), "stream end")

# Completions, whole and streamed, agree; stop sequences cut the text.
c = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=10, temperature=0)
streamed = "".join(x.choices[0].text for x in client.completions.create(
    model=MODEL, prompt="Once upon a time", max_tokens=10, temperature=0, stream=True))
check(c.choices[0].text == streamed, "completion stream")
full = c.choices[0].text
if len(full) > 3:
    stop = full[2:4]
    cut = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=10,
                                    temperature=0, stop=[stop])
    check(cut.choices[0].text == full[:full.index(stop)] and cut.choices[0].finish_reason == "stop",
          f"stop {stop!r}: {cut.choices[0].text!r}")
# Seeded sampling is reproducible.
s1 = chat("Seeded", seed=7, temperature=1.0).choices[0].message.content
check(s1 == chat("Seeded", seed=7, temperature=1.0).choices[0].message.content, "seed")

# 8 concurrent clients get what each prompt gives alone.
prompts = (EXPECTED["prompts"] * 8)[:8]
with ThreadPoolExecutor(8) as pool:
    got = list(pool.map(lambda p: chat(p).choices[0].message.content, prompts))
want = {p: t for p, t in zip(EXPECTED["prompts"], EXPECTED["texts"])}
check(got == [want[p] for p in prompts], f"concurrent: {got}")

# Bad requests: a 4xx with OpenAI's error object each, and the server goes on.
good = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
bad = [
    (b"{not json", 400),
    (b'{"model": "tiny", "messages": "\xff\xfe"}', 400),
    ({**good, "messages": "hello"}, 400),
    ({**good, "max_tokens": "many"}, 400),
    ({**good, "model": "no-such-model"}, 404),
    ({**good, "messages": []}, 400),
    ({**good, "max_tokens": -5}, 400),
    ({**good, "max_tokens": 10 ** 12}, 400),
    ({**good, "messages": [{"role": "wizard", "content": "hi"}]}, 400),
    ({**good, "temperature": 9}, 400),
    ({**good, "n": 3}, 400),
    ({**good, "messages": [{"role": "user", "content": "word " * 400}]}, 400),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "' + b"x" * 200_000 + b'"}]}', 413),
]
for body, status in bad:
    got_status, err = raw(MAIN, "/v1/chat/completions", body)
    check(got_status == status, f"{str(body)[:80]}: {got_status} (wanted {status}) {str(err)[:200]}")
    check(isinstance(err, dict) and "message" in err.get("error", {}), f"error object: {str(err)[:200]}")
    healthy(MAIN)
status, _ = raw(MAIN, "/v1/nothing", good)
check(status == 404, "unknown path")
check(chat(EXPECTED["prompts"][0]).choices[0].message.content == EXPECTED["texts"][0], "after bad requests")

# The limited server: the key, the queue, a client that goes away.
status, _ = raw(LIMITED, "/v1/chat/completions", good)
check(status == 401, f"no key: {status}")
status, _ = raw(LIMITED, "/v1/chat/completions", good, {"Authorization": "Bearer wrong"})
check(status == 401, f"wrong key: {status}")
status, _ = raw(LIMITED, "/v1/models", None, {"Authorization": "Bearer secret"}, method="GET")
check(status == 200, "key accepted")
healthy(LIMITED)
limited = openai.OpenAI(base_url=LIMITED + "/v1", api_key="secret", max_retries=0)
long_req = dict(model=MODEL, messages=[{"role": "user", "content": "Tell a long story"}],
                max_tokens=200, temperature=0)
statuses = []
def one(_):
    try:
        limited.chat.completions.create(**long_req)
        return 200
    except openai.APIStatusError as e:
        return e.status_code
with ThreadPoolExecutor(6) as pool:
    statuses = list(pool.map(one, range(6)))
check(statuses.count(429) >= 1 and statuses.count(200) >= 1 and set(statuses) <= {200, 429},
      f"queue full: {statuses}")
# A streaming client that disconnects after its first chunk frees the only slot.
stream = limited.chat.completions.create(**long_req, stream=True)
next(iter(stream))
stream.close()
t = time.time()
r = limited.chat.completions.create(**{**long_req, "max_tokens": 3})
check(r.choices[0].finish_reason == "length", "after a disconnect")
_, metrics = raw(LIMITED, "/metrics", None, method="GET")
check("df11_requests_cancelled_total" in metrics, "metrics")
cancelled = [l for l in metrics.splitlines() if l.startswith("df11_requests_cancelled_total ")]
check(cancelled and int(cancelled[0].split()[1]) >= 1, f"cancelled: {cancelled}")

# A bounded load test: 64 concurrent requests, at most 60 s.
def timed(i):
    t0 = time.time()
    client.chat.completions.create(model=MODEL, temperature=0, max_tokens=16,
                                   messages=[{"role": "user", "content": f"Request number {i}"}])
    return time.time() - t0
t0 = time.time()
with ThreadPoolExecutor(64) as pool:
    latencies = sorted(pool.map(timed, range(64)))
wall = time.time() - t0
check(wall < 60, f"load test took {wall:.1f} s")
p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
print("LOAD " + json.dumps({"requests": 64, "concurrency": 64, "max_tokens": 16, "wall_s": round(wall, 2),
                            "requests_per_s": round(64 / wall, 2), "p50_s": round(statistics.median(latencies), 3),
                            "p99_s": round(p99, 3)}))
healthy(MAIN)
print("OK")
