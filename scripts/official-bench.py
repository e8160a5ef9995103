#!/usr/bin/env python3
"""The official DFloat11 runtime (`dfloat11` 0.5.0, PyTorch) on a DF11 folder: the comparison
row of our GPU e2e bench, with the same shape of measurement as `qwen3-df11-bench` (a random
prompt of --prompt-tokens ids, then --decode-tokens greedy steps through the KV cache, timed
with CUDA synchronisation). Prints one JSON line.

    python3 scripts/official-bench.py DF11_DIR [--cpu-offload] [--cpu-offload-blocks N]
        [--prompt-tokens 512] [--decode-tokens 64]

It needs what the GPU machine lacks, copied there as wheels (scripts/fetch-official-wheels.sh puts
them in .whl/, then on the GPU machine: `python3 -m pip install -q --no-index --no-deps
--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site`): dfloat11 0.5.0, dahuffman 0.4.2,
and the transformers 4.51 line with the tokenizers and huggingface_hub it accepts.
"""
import argparse
import json
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("--cpu-offload", action="store_true",
                   help="dfloat11's cpu_offload=True: blocks in pinned host memory")
    p.add_argument("--cpu-offload-blocks", type=int, default=None,
                   help="offload only this many blocks (default: all, with --cpu-offload)")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()

    import torch
    from dfloat11 import DFloat11Model

    torch.manual_seed(a.seed)
    t = time.time()
    kwargs = {"cpu_offload": a.cpu_offload, "cpu_offload_blocks": a.cpu_offload_blocks}
    if a.cpu_offload:
        model = DFloat11Model.from_pretrained(a.model_dir, device="cuda", **kwargs)
    else:
        model = DFloat11Model.from_pretrained(a.model_dir, device_map="auto", **kwargs)
    torch.cuda.synchronize()
    load_s = time.time() - t
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, a.prompt_tokens), device="cuda")

    with torch.inference_mode():
        model(ids[:, :16], use_cache=True)  # warm-up
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t = time.time()
        out = model(ids, use_cache=True)
        torch.cuda.synchronize()
        prefill_s = time.time() - t
        past = out.past_key_values
        next_id = out.logits[:, -1:].argmax(-1)
        tokens = [int(next_id)]
        # The first step is untimed, as in qwen3-df11-bench.
        out = model(next_id, past_key_values=past, use_cache=True)
        past, next_id = out.past_key_values, out.logits[:, -1:].argmax(-1)
        tokens.append(int(next_id))
        torch.cuda.synchronize()
        t = time.time()
        for _ in range(a.decode_tokens):
            out = model(next_id, past_key_values=past, use_cache=True)
            past, next_id = out.past_key_values, out.logits[:, -1:].argmax(-1)
            tokens.append(int(next_id))
        torch.cuda.synchronize()
        decode_s = time.time() - t

    print(json.dumps({
        "format": "official-dfloat11" + ("-cpu-offload" if a.cpu_offload else ""),
        "batch": 1,
        "load_s": load_s,
        "prefill_tok_s": a.prompt_tokens / prefill_s,
        "decode_tok_s": a.decode_tokens / decode_s,
        "decode_ms_per_step": decode_s * 1e3 / a.decode_tokens,
        "peak_bytes": torch.cuda.max_memory_allocated(),
        "tokens": tokens,
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
