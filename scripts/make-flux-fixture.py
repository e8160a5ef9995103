#!/usr/bin/env python3
"""Generate tests/fixtures/models/flux-tiny/: a tiny FLUX.1 diffusers pipeline, its DF11 transformer, references.

What it writes (see tests/fixtures/flux-tiny.md for the full description):
  flux-tiny/base/            a complete diffusers FluxPipeline folder (FLUX.1-dev shaped: guidance_embeds true), every
                             model in BF16 safetensors, random "trained-looking" weights, locally built tokenizers
                             (tokenizer.json + tokenizer_config.json for both)
  flux-tiny/base-schnell/    transformer/ (guidance_embeds false, other random weights) + scheduler/ (FLUX.1-schnell
                             settings); the text encoders, tokenizers and VAE are those of base/
  flux-tiny/df11/            base/transformer compressed by the OFFICIAL dfloat11==0.5.0 `compress_model`, called with
  flux-tiny/df11-schnell/    the pattern_dict and arguments of the official example
                             LeanModels/DFloat11 examples/compress_flux1/compress_flux.py (save_single_file=False,
                             check_correctness=False: that check runs the CUDA kernel)
  flux-tiny/df11-single/     the same dev transformer with save_single_file=True (compress_flux.py --save_single_file):
                             config.json + one model.safetensors holding the same tensors byte for byte
  flux-tiny/reference.safetensors, reference.json, reference.png
                             reference outputs of diffusers (float32 and bf16 on CPU): text encoders, scheduler,
                             every denoising step, final latents, decoded image; a standalone transformer forward.

How:
  1. Build the models from tiny configs, fill every parameter deterministically (numpy PCG64 seeded from
     sha256("<component>/<tensor name>")): tensors with >= 2 dims N(0, 0.02), 1-D biases N(0, 0.02), 1-D norm weights
     1 + 0.1 N(0, 1), all rounded to BF16 (round-to-nearest-even). Save with FluxPipeline.save_pretrained.
  2. Compress base/transformer (re-loaded from disk in BF16) with dfloat11.compress_model on the CPU. dfloat11 0.5.0
     imports cupy and loads its PTX kernel at import time; this script puts a stub `cupy` module into sys.modules
     first (RawModule(...).get_function() and cuda.Device exist but raise if used), so a run that completes provably
     never touched a GPU. The stub is used even where a real cupy is installed.
  3. Check every DF11 unit with an independent numpy decoder (sequential bit cursor over the LUTs, as in
     docs/df11-format.md): decoded BF16 must equal base/transformer byte for byte; gaps and output_positions are
     re-derived from the decoded code positions and must equal the stored ones; plain tensors must be byte-identical;
     names must cover the checkpoint exactly. Then the transformer is rebuilt from df11/ + base config through that
     decoder and its standalone forward must equal the BF16 model's bit for bit. Any mismatch raises.
  4. Run FluxPipeline (re-loaded from base/ with torch_dtype float32, i.e. BF16 weights upcast exactly; then bfloat16;
     then float64 for error estimates) with fixed explicit initial latents (latents=...), record everything.

Determinism: no torch RNG is used anywhere (all random numbers come from numpy PCG64); torch runs with 1 thread.
Re-running gives byte-identical files with the same package versions on the same kind of CPU (float references may
differ in the last bits on a CPU with a different SIMD width; the BF16 weights, tokenizers and DF11 files do not).

Package versions used (pin them; Python 3.11.7):
    torch==2.15.0 (PyPI wheel, used on CPU only)  diffusers==0.33.1  transformers==4.51.3  tokenizers==0.21.4
    dfloat11==0.5.0 (installed with --no-deps)     dahuffman==0.4.2   safetensors==0.8.0    numpy==2.4.6
    accelerate==1.15.0  huggingface-hub==0.36.2    setuptools==80.10.2 (< 81: dfloat11 imports pkg_resources)
    pillow==13.0.0  sentencepiece==0.2.3  protobuf==7.36.2  (cupy NOT installed: stubbed)

Regenerate (about 10 seconds on 2 cores, after the installs):
    python3 -m venv /tmp/flux-venv
    /tmp/flux-venv/bin/pip install torch==2.15.0 diffusers==0.33.1 transformers==4.51.3 tokenizers==0.21.4 \
        dahuffman==0.4.2 safetensors==0.8.0 numpy==2.4.6 accelerate==1.15.0 huggingface-hub==0.36.2 \
        "setuptools==80.10.2" pillow==13.0.0 sentencepiece==0.2.3 protobuf==7.36.2
    /tmp/flux-venv/bin/pip install --no-deps dfloat11==0.5.0
    /tmp/flux-venv/bin/python scripts/make-flux-fixture.py            # writes tests/fixtures/models/flux-tiny
    /tmp/flux-venv/bin/python scripts/make-flux-fixture.py --verify   # only re-run the DF11 decoder checks
No network access is needed at run time (no Hugging Face Hub).
"""

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import sys
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "models", "flux-tiny")

PINNED = {
    "torch": "2.15.0", "diffusers": "0.33.1", "transformers": "4.51.3", "tokenizers": "0.21.4",
    "dfloat11": "0.5.0", "dahuffman": "0.4.2", "safetensors": "0.8.0", "numpy": "2.4.6",
}

# The pattern_dict of the official example LeanModels/DFloat11 examples/compress_flux1/compress_flux.py, verbatim
# (tuples, this member order: note add_k, add_v, add_q).
PATTERN_DICT = {
    "transformer_blocks\\.\\d+": (
        "norm1.linear",
        "norm1_context.linear",
        "attn.to_q",
        "attn.to_k",
        "attn.to_v",
        "attn.add_k_proj",
        "attn.add_v_proj",
        "attn.add_q_proj",
        "attn.to_out.0",
        "attn.to_add_out",
        "ff.net.0.proj",
        "ff.net.2",
        "ff_context.net.0.proj",
        "ff_context.net.2",
    ),
    "single_transformer_blocks\\.\\d+": (
        "norm.linear",
        "proj_mlp",
        "proj_out",
        "attn.to_q",
        "attn.to_k",
        "attn.to_v",
    ),
}
# compress_flux.py's --block_range default
BLOCK_RANGE = (0, 100)

PROMPT = "a tiny red fox"
HEIGHT = WIDTH = 64
NUM_STEPS = 4
GUIDANCE_SCALE = 3.5
MAX_SEQ_LEN = 16
LATENT_NOISE_TAG = "latents/init"

# Tiny configs ------------------------------------------------------------------------------------------------------
TRANSFORMER_CFG = dict(
    patch_size=1, in_channels=64, out_channels=None, num_layers=2, num_single_layers=2, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, guidance_embeds=True,
    axes_dims_rope=(4, 6, 6),
)
# FLUX.1-dev scheduler/scheduler_config.json settings
SCHEDULER_DEV = dict(
    num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
    base_image_seq_len=256, max_image_seq_len=4096,
)
# FLUX.1-schnell scheduler settings
SCHEDULER_SCHNELL = dict(
    num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False, base_shift=0.5, max_shift=1.15,
    base_image_seq_len=256, max_image_seq_len=4096,
)
VAE_CFG = dict(
    in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
    up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 16, 16, 16], layers_per_block=1,
    act_fn="silu", latent_channels=16, norm_num_groups=4, sample_size=64, scaling_factor=0.3611,
    shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False, force_upcast=True,
    mid_block_add_attention=True,
)
CLIP_HIDDEN = 32
T5_DMODEL = 32

WORDS = [
    "a", "tiny", "red", "fox", "photo", "of", "the", "in", "on", "with", "and", "small", "big", "cat", "dog", "blue",
    "green", "forest", "snow", "river", "house", "sky", "at", "night", "sunset", "painting", "an", "old", "man",
    "woman", "city", "tree", "flower", "mountain", "lake", "bird", "car", "white", "black", "yellow",
]

DF11_FIELDS = ("encoded_exponent", "sign_mantissa", "luts", "gaps", "output_positions", "split_positions")


# -------------------------------------------------------------------------------------------------------------------
def install_cupy_stub():
    """dfloat11 0.5.0 does `import cupy as cp` and `cp.RawModule(path=ptx).get_function('decode')` at import time.
    Provide just that (and cp.cuda.Device), raising if the GPU path is ever taken."""
    cp = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")

    class RawModule:
        def __init__(self, *args, **kwargs):
            pass

        def get_function(self, name):
            def no_gpu(*args, **kwargs):
                raise RuntimeError(f"cupy stub: GPU kernel {name!r} called on a CPU-only run")
            return no_gpu

    class Device:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("cupy stub: cupy.cuda.Device used on a CPU-only run")

    cp.RawModule = RawModule
    cuda.Device = Device
    cp.cuda = cuda
    cp.__version__ = "0.0.0-stub"
    sys.modules["cupy"] = cp
    sys.modules["cupy.cuda"] = cuda


def name_seed(tag):
    return int.from_bytes(hashlib.sha256(tag.encode()).digest()[:8], "little")


def randn(tag, shape):
    import numpy as np
    return np.random.default_rng(name_seed(tag)).standard_normal(tuple(shape), dtype=np.float32)


def bf16_round(x):
    """float32 numpy -> float32 numpy holding BF16-representable values (round to nearest even)."""
    import torch
    return torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()


def fill_random(model, tag, log):
    """Every parameter: >=2-D -> N(0,0.02); 1-D bias -> N(0,0.02); 1-D weight (norms) -> 1 + 0.1 N(0,1); BF16."""
    import torch
    norm_names = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            x = randn(f"{tag}/{name}", p.shape)
            if p.ndim >= 2:
                x = 0.02 * x
            elif p.ndim == 1 and name.endswith("bias"):
                x = 0.02 * x
            elif p.ndim == 1 and name.endswith("weight"):
                x = 1.0 + 0.1 * x
                norm_names.append(name)
            else:
                raise ValueError(f"unexpected parameter {tag}/{name} {tuple(p.shape)}")
            p.copy_(torch.from_numpy(x).to(torch.bfloat16).to(p.dtype))
    log[tag] = norm_names


def tensor_f32(x):
    import torch
    return x.detach().to(torch.float32).cpu().contiguous().clone()


def jfloat(x):
    """A JSON float that round-trips to the exact float32/float64 value."""
    return float(x)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


# Tokenizers --------------------------------------------------------------------------------------------------------
def build_clip_tokenizer():
    """CLIP-style byte-level BPE with '</w>' end-of-word suffix, like openai/clip-vit-large-patch14's tokenizer.json:
    ids 0..255 the byte alphabet, 256..511 the same with '</w>', then merge results, then <|startoftext|>,
    <|endoftext|> (the largest id). Merges: left-to-right chains building each word of WORDS."""
    from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, processors, decoders
    from transformers import CLIPTokenizerFast
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    chars = list(bytes_to_unicode().values())
    vocab = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    merges = []
    for w in WORDS:
        syms = list(w)
        syms[-1] += "</w>"
        cur = syms[0]
        for s in syms[1:]:
            if (cur, s) not in merges:
                merges.append((cur, s))
            cur = cur + s
            if cur not in vocab:
                vocab[cur] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<|endoftext|>", continuing_subword_prefix="",
                               end_of_word_suffix="</w>", fuse_unk=False))
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(
            Regex(r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
            behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.post_processor = processors.RobertaProcessing(
        sep=("<|endoftext|>", vocab["<|endoftext|>"]), cls=("<|startoftext|>", vocab["<|startoftext|>"]),
        trim_offsets=False, add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|startoftext|>", "<|endoftext|>"])
    return CLIPTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                             unk_token="<|endoftext|>", pad_token="<|endoftext|>", model_max_length=77)


def build_t5_tokenizer():
    """T5-style Unigram (SentencePiece-like) tokenizer: <pad>=0, </s>=1, <unk>=2, Metaspace '▁' pre-tokenizer,
    '$A </s>' post-processor. Hand-made vocabulary: '▁<word>' for WORDS (log-prob -5 - i/100), a few suffixes (-7),
    '▁' (-6), single characters (-10)."""
    import string
    from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, processors, decoders
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -6.0)]
    for i, w in enumerate(WORDS):
        pieces.append(("▁" + w, -5.0 - i / 100.0))
    for suf in ("s", "es", "ing", "ed", "er", "ly"):
        pieces.append((suf, -7.0))
    seen = {p for p, _ in pieces}
    for c in string.ascii_lowercase + string.ascii_uppercase + string.digits + ".,!?'-:;()\"":
        if c not in seen:
            pieces.append((c, -10.0))
            seen.add(c)
    tok = Tokenizer(models.Unigram(pieces, unk_id=2, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.add_special_tokens(["<pad>", "</s>", "<unk>"])
    return T5TokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                           extra_ids=0, model_max_length=512)


# Building the pipeline ---------------------------------------------------------------------------------------------
def build_base(out, weights_log):
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    clip_tok = build_clip_tokenizer()
    t5_tok = build_t5_tokenizer()

    clip_cfg = CLIPTextConfig(
        vocab_size=len(clip_tok), hidden_size=CLIP_HIDDEN, intermediate_size=64, projection_dim=CLIP_HIDDEN,
        num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
        layer_norm_eps=1e-5, attention_dropout=0.0, dropout=0.0,
        # as in FLUX.1-dev's text_encoder/config.json (openai/clip-vit-large-patch14): eos_token_id 2 selects the
        # legacy pooling rule "position of the largest input id", which is the first <|endoftext|> here.
        bos_token_id=0, eos_token_id=2, pad_token_id=1,
    )
    clip = CLIPTextModel(clip_cfg)
    fill_random(clip, "text_encoder", weights_log)

    t5_vocab_model = int(math.ceil(len(t5_tok) / 64.0) * 64)  # like FLUX's T5: model vocab 32128 > tokenizer 32100
    t5_cfg = T5Config(
        vocab_size=t5_vocab_model, d_model=T5_DMODEL, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
        layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu", tie_word_embeddings=False, is_encoder_decoder=True,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, use_cache=True,
    )
    t5 = T5EncoderModel(t5_cfg)
    fill_random(t5, "text_encoder_2", weights_log)

    vae = AutoencoderKL(**VAE_CFG)
    fill_random(vae, "vae", weights_log)

    transformer = FluxTransformer2DModel(**TRANSFORMER_CFG)
    fill_random(transformer, "transformer", weights_log)

    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_DEV)

    pipe = FluxPipeline(scheduler=scheduler, vae=vae.to(torch.bfloat16), text_encoder=clip.to(torch.bfloat16),
                        tokenizer=clip_tok, text_encoder_2=t5.to(torch.bfloat16), tokenizer_2=t5_tok,
                        transformer=transformer.to(torch.bfloat16))
    pipe.save_pretrained(os.path.join(out, "base"), safe_serialization=True)

    # schnell-shaped variant: no guidance embedder, other weights, schnell scheduler settings
    cfg = dict(TRANSFORMER_CFG, guidance_embeds=False)
    tr_s = FluxTransformer2DModel(**cfg)
    fill_random(tr_s, "transformer-schnell", weights_log)
    tr_s.to(torch.bfloat16).save_pretrained(os.path.join(out, "base-schnell", "transformer"),
                                            safe_serialization=True)
    FlowMatchEulerDiscreteScheduler(**SCHEDULER_SCHNELL).save_pretrained(
        os.path.join(out, "base-schnell", "scheduler"))


# DF11 compression --------------------------------------------------------------------------------------------------
def compress(transformer_dir, save_path, log_path, save_single_file=False):
    import torch
    from diffusers import FluxTransformer2DModel
    install_cupy_stub()
    from dfloat11 import compress_model

    model = FluxTransformer2DModel.from_pretrained(transformer_dir, torch_dtype=torch.bfloat16)
    # The compressor prints its code tables, LUT dicts and tqdm bars; send them (fd 1 and 2, since dahuffman's
    # print_code_table has sys.stdout bound as a default argument) to a log file.
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "w") as logf:
        os.dup2(logf.fileno(), 1)
        os.dup2(logf.fileno(), 2)
        try:
            compress_model(
                model=model,
                pattern_dict=PATTERN_DICT,
                save_path=save_path,
                save_single_file=save_single_file,
                check_correctness=False,
                block_range=BLOCK_RANGE,
            )
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    with open(log_path) as f:
        return [l.strip() for l in f if l.startswith("Compression factor")]


# Independent DF11 decoder / checker --------------------------------------------------------------------------------
def load_u16(path):
    """safetensors file -> {name: (dtype_str, shape, raw bytes as numpy uint8)} without torch dtype games."""
    import numpy as np
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = (meta["dtype"], tuple(meta["shape"]), np.frombuffer(data[a:b], dtype=np.uint8))
    return out


def decode_unit(t):
    """Sequential decode of one DF11 unit. Returns (bf16 bits as uint16 [N], stats). Also re-derives gaps and
    output_positions from the decoded code positions and checks them against the stored tensors."""
    import numpy as np
    luts = t["luts"]
    K = luts.shape[0]
    if not (2 <= K <= 18):
        raise AssertionError(f"luts rows {K} out of range")
    rows = [list(map(int, luts[r])) for r in range(K - 1)]
    lens = list(map(int, luts[K - 1]))
    enc = t["encoded_exponent"]
    sm = t["sign_mantissa"]
    N = len(sm)
    B = len(enc)
    stream = bytes(enc) + bytes(8)
    exps = np.empty(N, dtype=np.uint16)
    starts = []
    p = 0
    max_len = 0
    for i in range(N):
        byte, off = p >> 3, p & 7
        w = (int.from_bytes(stream[byte:byte + 5], "big") >> (8 - off)) & 0xFFFFFFFF
        row, shift = 0, 24
        while True:
            v = rows[row][(w >> shift) & 0xFF]
            if v >= 240:
                row = 256 - v
                shift -= 8
                if shift < 0 or row >= K - 1:
                    raise AssertionError(f"bad LUT chain at element {i}")
            else:
                break
        L = lens[v]
        if L == 0 or L > 32:
            raise AssertionError(f"bad code length {L} for exponent {v} at element {i}")
        starts.append(p)
        exps[i] = v
        p += L
        max_len = max(max_len, L)
    if (p + 7) // 8 > B:
        raise AssertionError("bitstream shorter than the decoded codes")
    bits = ((sm.astype(np.uint16) & 0x80) << 8) | (exps << 7) | (sm.astype(np.uint16) & 0x7F)

    # re-derive gaps / output_positions exactly as the official encoder emits them
    bpt, tpb = 8, 512
    gaps, outpos = [], []
    for i, s in enumerate(starts + ([p] if p % 8 else [])):  # the EOF code starts at p if the stream isn't aligned
        if s // (8 * bpt) + 1 > len(gaps):
            gaps.append(s - s // (8 * bpt) * (8 * bpt))
        if s // (8 * bpt * tpb) + 1 > len(outpos):
            outpos.append(i)
    outpos.append(N)
    NB = int(math.ceil(B / (tpb * bpt)))
    if B != (p + 7) // 8:
        raise AssertionError(f"encoded_exponent has {B} bytes, codes need {(p + 7) // 8}")
    gaps.extend([0] * (tpb * NB - len(gaps)))
    gaps_packed = np.packbits(np.array([int(b) for g in gaps for b in format(g, "05b")], dtype=np.uint8))
    if not np.array_equal(gaps_packed, t["gaps"]):
        raise AssertionError("gaps differ from the values derived from the decoded code positions")
    op = np.frombuffer(t["output_positions"].tobytes(), dtype="<u4")
    if not np.array_equal(op, np.array(outpos, dtype=np.uint32)):
        raise AssertionError("output_positions differ from the derived values")
    # loader invariants (docs/df11-format.md 1.4)
    assert op[0] == 0 and np.all(np.diff(op.astype(np.int64)) >= 0) and op[-1] == N
    assert len(op) - 1 in (NB, NB - 1)
    assert len(t["gaps"]) >= int(math.ceil(5 * 512 * NB / 8))
    assert all(v < 240 or 1 <= 256 - v <= K - 2 for r in rows for v in r)
    if np.any((exps >= 240)):
        raise AssertionError("exponent >= 240 cannot be represented")
    stats = dict(n_elements=N, n_bytes=B, n_blocks=NB, n_luts=K, max_code_len=max_len,
                 n_output_positions=len(op),
                 bits_per_weight=round((B + N + len(t["gaps"]) + len(t["output_positions"])) * 8 / N, 3))
    return bits, stats


def verify_df11(base_transformer_dir, df11_dir, single_file=False):
    """Decode every unit of df11_dir and compare with base_transformer_dir/diffusion_pytorch_model.safetensors."""
    import numpy as np
    base = load_u16(os.path.join(base_transformer_dir, "diffusion_pytorch_model.safetensors"))
    with open(os.path.join(df11_dir, "config.json")) as f:
        cfg = json.load(f)
    assert list(cfg.keys()) == ["dfloat11_config"], f"unexpected config keys {list(cfg)}"
    d = cfg["dfloat11_config"]
    assert d["version"] == "0.5.0" and d["threads_per_block"] == [512] and d["bytes_per_thread"] == 8
    pattern_dict = d["pattern_dict"]
    assert pattern_dict == {k: list(v) for k, v in PATTERN_DICT.items()}

    groups, plain = {}, {}
    for fn in sorted(os.listdir(df11_dir)):
        if not fn.endswith(".safetensors"):
            continue
        for name, (dt, shape, raw) in load_u16(os.path.join(df11_dir, fn)).items():
            g, _, field = name.rpartition(".")
            if field in DF11_FIELDS:
                groups.setdefault(g, {})[field] = (dt, shape, raw, fn)
            else:
                assert name not in plain, f"duplicate tensor {name}"
                plain[name] = (dt, shape, raw, fn)

    decoded_names = set()
    unit_stats = {}
    for g in sorted(groups):
        fields = groups[g]
        assert set(fields) == set(DF11_FIELDS), f"{g}: fields {sorted(fields)}"
        exp_dt = dict(encoded_exponent="U8", sign_mantissa="U8", luts="U8", gaps="U8", output_positions="U8",
                      split_positions="I64")
        for k, (dt, shape, raw, fn) in fields.items():
            assert dt == exp_dt[k], f"{g}.{k} dtype {dt}"
        unit_file = "model.safetensors" if single_file else g.replace(".", "_") + ".safetensors"
        assert all(f[3] == unit_file for f in fields.values()), f"{g}: unit tensors not in {unit_file}"
        keys = [k for k in pattern_dict if re.fullmatch(k, g)]
        assert len(keys) == 1, f"{g} matches {keys}"
        members = [f"{g}.{a}.weight" for a in pattern_dict[keys[0]]] if pattern_dict[keys[0]] else [f"{g}.weight"]
        t = {k: fields[k][2] for k in DF11_FIELDS}
        t["luts"] = t["luts"].reshape(fields["luts"][1])
        split = np.frombuffer(t["split_positions"].tobytes(), dtype="<i8")
        bits, st = decode_unit(t)
        numels = [int(np.prod(base[m][1])) for m in members]
        assert sum(numels) == len(bits), f"{g}: {sum(numels)} != {len(bits)}"
        assert list(split) == list(np.cumsum(numels)[:-1]), f"{g}: split_positions {list(split)}"
        for m, a, b in zip(members, [0] + list(split), list(split) + [len(bits)]):
            dt, shape, raw = base[m]
            assert dt == "BF16"
            if bits[a:b].astype("<u2").tobytes() != raw.tobytes():
                raise AssertionError(f"DF11 decode of {m} differs from the BF16 original")
            decoded_names.add(m)
        st["file"] = fields["encoded_exponent"][3]
        st["members"] = len(members)
        unit_stats[g] = st

    for name, (dt, shape, raw, fn) in plain.items():
        assert name in base, f"plain tensor {name} not in the BF16 checkpoint"
        bdt, bshape, braw = base[name]
        assert (dt, shape) == (bdt, bshape) and raw.tobytes() == braw.tobytes(), f"plain tensor {name} differs"
    assert not (decoded_names & set(plain))
    missing = set(base) - decoded_names - set(plain)
    extra = (decoded_names | set(plain)) - set(base)
    assert not missing and not extra, f"coverage: missing {sorted(missing)} extra {sorted(extra)}"
    return unit_stats, len(decoded_names), len(plain)


def state_dict_from_df11(df11_dir):
    """Rebuild a BF16 state dict from a DF11 folder with the independent decoder (for the functional check)."""
    import numpy as np
    import torch
    with open(os.path.join(df11_dir, "config.json")) as f:
        pattern_dict = json.load(f)["dfloat11_config"]["pattern_dict"]
    groups, sd = {}, {}
    from safetensors.torch import load_file
    for fn in sorted(os.listdir(df11_dir)):
        if fn.endswith(".safetensors"):
            for name, v in load_file(os.path.join(df11_dir, fn)).items():
                g, _, field = name.rpartition(".")
                if field in DF11_FIELDS:
                    groups.setdefault(g, {})[field] = v.numpy()
                else:
                    sd[name] = v
    for g, t in groups.items():
        key = [k for k in pattern_dict if re.fullmatch(k, g)][0]
        members = [f"{g}.{a}.weight" for a in pattern_dict[key]]
        bits, _ = decode_unit(t)
        flat = torch.from_numpy(bits.astype(np.int16)).view(torch.bfloat16)
        split = list(t["split_positions"])
        for m, a, b in zip(members, [0] + split, split + [len(bits)]):
            sd[m] = flat[a:b].clone()  # reshaped by the caller from the skeleton's shapes
    return sd


# Reference runs ----------------------------------------------------------------------------------------------------
def load_pipe(out, dtype, schnell=False):
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    kw = {}
    if schnell:
        kw["transformer"] = FluxTransformer2DModel.from_pretrained(
            os.path.join(out, "base-schnell", "transformer"), torch_dtype=dtype)
        kw["scheduler"] = FlowMatchEulerDiscreteScheduler.from_pretrained(
            os.path.join(out, "base-schnell", "scheduler"))
    pipe = FluxPipeline.from_pretrained(os.path.join(out, "base"), torch_dtype=dtype, **kw)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@contextlib.contextmanager
def default_dtype(dtype):
    """The float64 runs need torch's default dtype float64: transformers' CLIP causal mask is built with
    torch.full(..., finfo(float64).min) in the default dtype, which overflows float32."""
    import torch
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype if dtype == torch.float64 else old)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def run_pipeline(pipe, latents, guidance_scale):
    """Run the pipeline once, recording text-encoder outputs, scheduler values, every transformer call, the
    latents after every step, the VAE input/output and the post-processed image."""
    import numpy as np
    import torch
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    rec = {}
    with torch.no_grad():
        prompt_embeds, pooled, text_ids = pipe.encode_prompt(prompt=PROMPT, prompt_2=None,
                                                            max_sequence_length=MAX_SEQ_LEN)
        clip_ids = pipe.tokenizer(PROMPT, padding="max_length", max_length=pipe.tokenizer_max_length,
                                  truncation=True, return_tensors="pt").input_ids
        clip_out = pipe.text_encoder(clip_ids, output_hidden_states=False)
    rec["clip_last_hidden_state"] = clip_out.last_hidden_state
    rec["clip_pooled"] = pooled
    rec["t5_hidden_states"] = prompt_embeds
    rec["txt_ids"] = text_ids

    calls = []

    def pre(mod, args, kwargs):
        calls.append({k: v.detach().clone() for k, v in kwargs.items() if torch.is_tensor(v)})

    def post(mod, args, kwargs, output):
        calls[-1]["out"] = output[0].detach().clone()

    step_latents = []

    def on_step_end(p, i, t, cb):
        step_latents.append(cb["latents"].detach().clone())
        return {}

    vae_io = {}
    orig_decode = pipe.vae.decode

    def decode_wrap(z, *a, **k):
        vae_io["in"] = z.detach().clone()
        res = orig_decode(z, *a, **k)
        vae_io["out"] = res[0].detach().clone()
        return res

    pipe.vae.decode = decode_wrap
    h1 = pipe.transformer.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = pipe.transformer.register_forward_hook(post, with_kwargs=True)
    try:
        with torch.no_grad():
            image = pipe(PROMPT, height=HEIGHT, width=WIDTH, num_inference_steps=NUM_STEPS,
                         guidance_scale=guidance_scale, max_sequence_length=MAX_SEQ_LEN, latents=latents,
                         output_type="np", callback_on_step_end=on_step_end).images
    finally:
        h1.remove()
        h2.remove()
        pipe.vae.decode = orig_decode

    image_seq_len = latents.shape[1]
    c = pipe.scheduler.config
    rec["mu"] = calculate_shift(image_seq_len, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                                c.get("base_shift", 0.5), c.get("max_shift", 1.15))
    rec["sigmas"] = pipe.scheduler.sigmas.clone()
    rec["timesteps"] = pipe.scheduler.timesteps.clone()
    assert len(calls) == NUM_STEPS and len(step_latents) == NUM_STEPS
    for i, cl in enumerate(calls):
        # the pipeline passes exactly the encode_prompt outputs
        assert torch.equal(cl["encoder_hidden_states"], prompt_embeds)
        assert torch.equal(cl["pooled_projections"], pooled)
    rec["img_ids"] = calls[0]["img_ids"]
    rec["calls"] = calls
    rec["step_latents"] = step_latents
    rec["vae_in"] = vae_io["in"]
    rec["vae_out"] = vae_io["out"]
    rec["image"] = torch.from_numpy(np.ascontiguousarray(image))
    return rec


def transformer_check_inputs():
    import numpy as np
    import torch
    from diffusers.pipelines.flux.pipeline_flux import FluxPipeline
    h, w, txt = 4, 6, 7  # a 4x6 grid of packed latent patches (a 64x96 image), 7 text tokens
    inp = {
        "hidden_states": torch.from_numpy(bf16_round(randn("tcheck/hidden_states", (1, h * w, 64)))),
        "encoder_hidden_states": torch.from_numpy(bf16_round(randn("tcheck/encoder_hidden_states", (1, txt, 32)))),
        "pooled_projections": torch.from_numpy(bf16_round(randn("tcheck/pooled_projections", (1, 32)))),
        "timestep": torch.tensor([0.625], dtype=torch.float32),  # as the pipeline passes it (t / 1000)
        "guidance": torch.tensor([4.0], dtype=torch.float32),
        "img_ids": FluxPipeline._prepare_latent_image_ids(1, h, w, "cpu", torch.float32),
        "txt_ids": torch.zeros(txt, 3, dtype=torch.float32),
    }
    return inp


def run_transformer(model, inp, dtype, guidance=True):
    import torch
    # everything in the run's dtype, as FluxPipeline does (ids are small integers, exact in BF16; FluxPosEmbed
    # converts them to float and builds the RoPE table in float64 on CPU anyway)
    kw = {k: v.to(dtype) for k, v in inp.items()}
    if not guidance:
        kw.pop("guidance")
    with torch.no_grad():
        return model(**kw, return_dict=False)[0]


def maxabs(a, b):
    import torch
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max())


# Main --------------------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--verify", action="store_true", help="only run the independent DF11 checks on --out")
    args = ap.parse_args()
    out = os.path.abspath(args.out)

    import numpy as np
    import torch
    import diffusers
    import transformers
    import tokenizers
    import safetensors
    import dahuffman  # noqa: F401
    from importlib.metadata import version as pkg_version

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    versions = {k: pkg_version(k) for k in PINNED}
    versions["python"] = sys.version.split()[0]
    for k, v in PINNED.items():
        if versions[k] != v:
            print(f"WARNING: {k} {versions[k]} != pinned {v}; output may differ", file=sys.stderr)

    if args.verify:
        for base_tr, d in (("base/transformer", "df11"), ("base-schnell/transformer", "df11-schnell"),
                           ("base/transformer", "df11-single")):
            st, nd, npl = verify_df11(os.path.join(out, base_tr), os.path.join(out, d), d == "df11-single")
            print(f"{d}: {len(st)} units, {nd} decoded weights, {npl} plain tensors: bit-exact OK")
        return

    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    log = {}
    weights_log = {}

    # 1. base pipeline -----------------------------------------------------------------------------------------------
    build_base(out, weights_log)

    # 2. DF11 ---------------------------------------------------------------------------------------------------------
    logdir = os.path.join("/tmp", "flux-fixture-logs")
    os.makedirs(logdir, exist_ok=True)
    cf = compress(os.path.join(out, "base", "transformer"), os.path.join(out, "df11"),
                  os.path.join(logdir, "compress-dev.log"))
    cf_s = compress(os.path.join(out, "base-schnell", "transformer"), os.path.join(out, "df11-schnell"),
                    os.path.join(logdir, "compress-schnell.log"))
    # the same dev transformer with save_single_file=True (compress_flux.py --save_single_file): config.json +
    # one model.safetensors
    compress(os.path.join(out, "base", "transformer"), os.path.join(out, "df11-single"),
             os.path.join(logdir, "compress-single.log"), save_single_file=True)

    # 3. independent checks ---------------------------------------------------------------------------------------
    units, n_dec, n_plain = verify_df11(os.path.join(out, "base", "transformer"), os.path.join(out, "df11"))
    units_s, n_dec_s, n_plain_s = verify_df11(os.path.join(out, "base-schnell", "transformer"),
                                              os.path.join(out, "df11-schnell"))
    print(f"df11: {len(units)} units, {n_dec} decoded weights, {n_plain} plain tensors: bit-exact OK")
    print(f"df11-schnell: {len(units_s)} units, {n_dec_s} decoded weights, {n_plain_s} plain tensors: bit-exact OK")
    units_1, n_dec_1, n_plain_1 = verify_df11(os.path.join(out, "base", "transformer"),
                                              os.path.join(out, "df11-single"), single_file=True)
    print(f"df11-single: {len(units_1)} units, {n_dec_1} decoded weights, {n_plain_1} plain tensors: bit-exact OK")
    # every tensor of df11-single/model.safetensors is byte-identical to the same-named tensor in df11/
    multi = {}
    for fn in os.listdir(os.path.join(out, "df11")):
        if fn.endswith(".safetensors"):
            multi.update(load_u16(os.path.join(out, "df11", fn)))
    single = load_u16(os.path.join(out, "df11-single", "model.safetensors"))
    assert set(single) == set(multi)
    for k, (dt, shape, raw) in single.items():
        assert (dt, shape, raw.tobytes()) == (multi[k][0], multi[k][1], multi[k][2].tobytes()), k
    with open(os.path.join(out, "df11", "config.json"), "rb") as f1, \
            open(os.path.join(out, "df11-single", "config.json"), "rb") as f2:
        assert f1.read() == f2.read()

    # 4. references ---------------------------------------------------------------------------------------------------
    from diffusers import FluxTransformer2DModel
    from diffusers.pipelines.flux.pipeline_flux import FluxPipeline
    from safetensors.torch import save_file

    T = {}  # reference tensors (float32)
    J = {}  # reference.json

    # initial noise: N(0,1) in the VAE latent layout [1, 16, 8, 8], rounded to BF16 so that the float32 and bf16
    # runs start from the same values, then packed 2x2 into [1, 16 tokens, 64] as FluxPipeline does
    lat_h = 2 * (HEIGHT // (8 * 2))
    lat_w = 2 * (WIDTH // (8 * 2))
    noise = torch.from_numpy(bf16_round(randn(LATENT_NOISE_TAG, (1, 16, lat_h, lat_w))))
    packed = FluxPipeline._pack_latents(noise, 1, 16, lat_h, lat_w)
    T["latents.noise_unpacked"] = noise
    T["latents.init"] = packed

    runs = {}
    for tag, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f64", torch.float64)):
        with default_dtype(dtype):
            pipe = load_pipe(out, dtype)
            runs[tag] = run_pipeline(pipe, packed.clone(), GUIDANCE_SCALE)
        del pipe
    runs_s = {}
    for tag, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f64", torch.float64)):
        with default_dtype(dtype):
            pipe = load_pipe(out, dtype, schnell=True)
            runs_s[tag] = run_pipeline(pipe, packed.clone(), 0.0)
        del pipe

    clip_tok = transformers.CLIPTokenizerFast.from_pretrained(os.path.join(out, "base", "tokenizer"))
    t5_tok = transformers.T5TokenizerFast.from_pretrained(os.path.join(out, "base", "tokenizer_2"))
    clip_ids = clip_tok(PROMPT, padding="max_length", max_length=77, truncation=True).input_ids
    t5_ids = t5_tok(PROMPT, padding="max_length", max_length=MAX_SEQ_LEN, truncation=True).input_ids

    def put_run(prefix, r, keep_text=True):
        if keep_text:
            T[f"{prefix}.clip_last_hidden_state"] = tensor_f32(r["clip_last_hidden_state"])
            T[f"{prefix}.clip_pooled"] = tensor_f32(r["clip_pooled"])
            T[f"{prefix}.t5_hidden_states"] = tensor_f32(r["t5_hidden_states"])
        for i, cl in enumerate(r["calls"]):
            T[f"{prefix}.step{i}.latents_in"] = tensor_f32(cl["hidden_states"])
            T[f"{prefix}.step{i}.timestep"] = tensor_f32(cl["timestep"])
            if "guidance" in cl:
                T[f"{prefix}.step{i}.guidance"] = tensor_f32(cl["guidance"])
            T[f"{prefix}.step{i}.noise_pred"] = tensor_f32(cl["out"])
            T[f"{prefix}.step{i}.latents_out"] = tensor_f32(r["step_latents"][i])
        T[f"{prefix}.latents_final"] = tensor_f32(r["step_latents"][-1])
        T[f"{prefix}.vae_input"] = tensor_f32(r["vae_in"])
        T[f"{prefix}.vae_output"] = tensor_f32(r["vae_out"])
        T[f"{prefix}.image"] = tensor_f32(r["image"])

    def check_step_rule(r, run_dtype):
        sig = r["sigmas"]
        for i, cl in enumerate(r["calls"]):
            dt = (sig[i + 1] - sig[i]).to(torch.float32)
            x = cl["hidden_states"].to(torch.float32)
            e = cl["out"]
            y = (x + dt * e).to(run_dtype)  # torch promotion: dt * e stays in e's dtype
            if not torch.equal(y, r["step_latents"][i]):
                raise AssertionError(f"documented step rule does not reproduce step {i} ({run_dtype})")

    for rr in (runs, runs_s):
        check_step_rule(rr["f32"], torch.float32)
        check_step_rule(rr["bf16"], torch.bfloat16)

    put_run("pipeline.f32", runs["f32"])
    put_run("pipeline.bf16", runs["bf16"])
    put_run("schnell.f32", runs_s["f32"], keep_text=False)
    put_run("schnell.bf16", runs_s["bf16"], keep_text=False)
    T["pipeline.img_ids"] = tensor_f32(runs["f32"]["img_ids"])
    T["pipeline.txt_ids"] = tensor_f32(runs["f32"]["txt_ids"])
    T["pipeline.sigmas"] = tensor_f32(runs["f32"]["sigmas"])
    T["pipeline.timesteps"] = tensor_f32(runs["f32"]["timesteps"])
    T["schnell.sigmas"] = tensor_f32(runs_s["f32"]["sigmas"])
    T["schnell.timesteps"] = tensor_f32(runs_s["f32"]["timesteps"])
    # text encoder outputs do not depend on the transformer: the schnell runs reuse base/'s encoders
    assert torch.equal(runs_s["f32"]["t5_hidden_states"], runs["f32"]["t5_hidden_states"])

    img_u8 = (runs["f32"]["image"][0].numpy() * 255).round().astype(np.uint8)
    from PIL import Image
    Image.fromarray(img_u8).save(os.path.join(out, "reference.png"))
    img_u8_bf16 = (runs["bf16"]["image"][0].numpy() * 255).round().astype(np.uint8)

    # standalone transformer check (dev and schnell), float32 / bf16 / float64, plus the DF11-rebuilt model
    inp = transformer_check_inputs()
    for k, v in inp.items():
        T[f"tcheck.{k}"] = tensor_f32(v)
    tcheck = {}
    for variant, tdir, d11, g in (("dev", "base/transformer", "df11", True),
                                  ("schnell", "base-schnell/transformer", "df11-schnell", False)):
        res = {}
        for tag, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f64", torch.float64)):
            with default_dtype(dtype):
                m = FluxTransformer2DModel.from_pretrained(os.path.join(out, tdir), torch_dtype=dtype)
                res[tag] = run_transformer(m, inp, dtype, guidance=g)
        # DF11 functional check: skeleton from the base config + weights decoded from the DF11 folder
        skel = FluxTransformer2DModel.from_config(FluxTransformer2DModel.load_config(os.path.join(out, tdir)))
        skel = skel.to(torch.bfloat16)
        sd = state_dict_from_df11(os.path.join(out, d11))
        ref_sd = skel.state_dict()
        sd = {k: v.reshape(ref_sd[k].shape) for k, v in sd.items()}
        assert set(sd) == set(ref_sd)
        skel.load_state_dict(sd, strict=True)
        df11_out = run_transformer(skel, inp, torch.bfloat16, guidance=g)
        if not torch.equal(df11_out, res["bf16"]):
            raise AssertionError(f"{variant}: DF11-rebuilt transformer output differs from the BF16 model's")
        skel32 = skel.to(torch.float32)
        if not torch.equal(run_transformer(skel32, inp, torch.float32, guidance=g), res["f32"]):
            raise AssertionError(f"{variant}: DF11-rebuilt transformer (f32) differs")
        p = "tcheck" if variant == "dev" else "tcheck_schnell"
        T[f"{p}.output_f32"] = tensor_f32(res["f32"])
        T[f"{p}.output_bf16"] = tensor_f32(res["bf16"])
        tcheck[variant] = dict(
            max_abs_f32_vs_f64=maxabs(res["f32"], res["f64"]),
            max_abs_bf16_vs_f64=maxabs(res["bf16"], res["f64"]),
            max_abs_output_f64=float(res["f64"].abs().max()),
            df11_rebuilt_output_equals_bf16_and_f32_bitwise=True,
        )

    save_file(dict(sorted(T.items())), os.path.join(out, "reference.safetensors"))

    # reference.json --------------------------------------------------------------------------------------------------
    f32, bf, f64 = runs["f32"], runs["bf16"], runs["f64"]

    def errs(r32, r64, rbf):
        keys = ["clip_pooled", "t5_hidden_states", "vae_out", "image"]
        e = {}
        for k in keys:
            e[f"{k}_f32_vs_f64"] = maxabs(r32[k], r64[k])
            e[f"{k}_bf16_vs_f64"] = maxabs(rbf[k], r64[k])
        e["noise_pred_f32_vs_f64_per_step"] = [maxabs(a["out"], b["out"]) for a, b in zip(r32["calls"], r64["calls"])]
        e["noise_pred_bf16_vs_f64_per_step"] = [maxabs(a["out"], b["out"]) for a, b in zip(rbf["calls"], r64["calls"])]
        e["latents_final_f32_vs_f64"] = maxabs(r32["step_latents"][-1], r64["step_latents"][-1])
        e["latents_final_bf16_vs_f64"] = maxabs(rbf["step_latents"][-1], r64["step_latents"][-1])
        e["max_abs_noise_pred_f64"] = max(float(c["out"].abs().max()) for c in r64["calls"])
        e["max_abs_latents_final_f64"] = float(r64["step_latents"][-1].abs().max())
        return e

    def steps_json(r):
        return [dict(index=i,
                     timestep_passed=jfloat(cl["timestep"][0]),
                     # what FluxTransformer2DModel feeds to its sinusoidal embedding: timestep.to(dtype) * 1000
                     # in the run's dtype (bf16 rounds twice: t/1000 and then *1000)
                     timestep_x1000=jfloat((cl["timestep"] * 1000)[0]),
                     guidance_passed=(jfloat(cl["guidance"][0]) if "guidance" in cl else None),
                     guidance_x1000=(jfloat((cl["guidance"].to(cl["hidden_states"].dtype) * 1000)[0])
                                     if "guidance" in cl else None),
                     sigma=jfloat(r["sigmas"][i]), sigma_next=jfloat(r["sigmas"][i + 1]))
                for i, cl in enumerate(r["calls"])]

    for root, _, fns in os.walk(out):  # safetensors' save_file creates 0600 files; make them all 0644
        for fn in fns:
            os.chmod(os.path.join(root, fn), 0o644)
    files = {}
    for root, _, fns in os.walk(out):
        for fn in sorted(fns):
            pth = os.path.join(root, fn)
            rel = os.path.relpath(pth, out)
            if rel == "reference.json":
                continue
            files[rel] = dict(size=os.path.getsize(pth), sha256=sha256_file(pth))
    files = dict(sorted(files.items()))

    J = {
        "description": "Tiny FLUX.1 pipeline references from diffusers on CPU; tensors in reference.safetensors "
                       "(float32). See tests/fixtures/flux-tiny.md.",
        "versions": versions,
        "generator": "scripts/make-flux-fixture.py",
        "prompt": PROMPT,
        "height": HEIGHT, "width": WIDTH, "num_inference_steps": NUM_STEPS, "guidance_scale": GUIDANCE_SCALE,
        "max_sequence_length": MAX_SEQ_LEN,
        "vae_scale_factor": 8, "latent_channels": 16, "latent_hw": [lat_h, lat_w],
        "packed_latents_shape": list(packed.shape), "image_seq_len": int(packed.shape[1]),
        "noise": {"source": "numpy default_rng(seed).standard_normal(float32), rounded to BF16",
                  "seed": name_seed(LATENT_NOISE_TAG), "unpacked": "latents.noise_unpacked [1,16,8,8]",
                  "packed": "latents.init [1,16,64] (passed as FluxPipeline(latents=...))"},
        "tokens": {
            "clip": {"ids": clip_ids, "ids_unpadded": clip_tok(PROMPT).input_ids, "max_length": 77,
                     "pad_token": "<|endoftext|>", "pad_id": clip_tok.pad_token_id,
                     "pooled_position": int(np.argmax(clip_ids)),
                     "pooled_rule": "CLIPTextModel with config eos_token_id 2 (legacy): row of last_hidden_state "
                                    "(after final_layer_norm) at argmax(input_ids) = the first <|endoftext|>"},
            "t5": {"ids": t5_ids, "ids_unpadded": t5_tok(PROMPT).input_ids, "max_length": MAX_SEQ_LEN,
                   "pad_id": t5_tok.pad_token_id, "eos_id": t5_tok.eos_token_id,
                   "note": "FluxPipeline passes no attention mask to either encoder: padding is attended"},
            "extra_checks": [
                {"text": t, "clip_ids": clip_tok(t).input_ids, "t5_ids": t5_tok(t).input_ids}
                for t in ("A  Tiny red foxes, at sunset!", "photo of the old man in the snow (Lake 42)")
            ],
        },
        "scheduler": {
            "class": "FlowMatchEulerDiscreteScheduler", "config": SCHEDULER_DEV,
            "mu": jfloat(f32["mu"]),
            "mu_formula": "calculate_shift(image_seq_len=16, 256, 4096, 0.5, 1.15) = 0.5 + (16-256)*(1.15-0.5)/(4096-256)",
            "sigmas_in": "np.linspace(1.0, 1/num_steps, num_steps) (float32), then exp(mu)/(exp(mu)+(1/s-1)) "
                         "in float32, then a final 0 appended",
            "sigmas": [jfloat(s) for s in f32["sigmas"]],
            "timesteps": [jfloat(t) for t in f32["timesteps"]],
            "step_rule": "latents_next = to_dtype(float32(latents) + dt * noise_pred) with dt = sigma_next - sigma "
                         "(a 0-dim float32 tensor). In the bf16 run torch's promotion computes dt * noise_pred in "
                         "BF16 (rounded) before the float32 add; the final to_dtype rounds to BF16. The generator "
                         "asserts that this rule reproduces every recorded latents_out bit for bit.",
        },
        "steps_f32": steps_json(f32),
        "steps_bf16": steps_json(bf),
        "vae": {"scaling_factor": VAE_CFG["scaling_factor"], "shift_factor": VAE_CFG["shift_factor"],
                "decode_input": "unpack(latents_final) / scaling_factor + shift_factor",
                "postprocess": "image = clamp(vae_output / 2 + 0.5, 0, 1), NCHW -> NHWC; png = round(image*255)"},
        "png": {"file": "reference.png", "from": "pipeline.f32.image",
                "bf16_run_png_max_abs_diff_levels": int(np.abs(img_u8.astype(int) - img_u8_bf16.astype(int)).max())},
        "schnell": {
            "scheduler_config": SCHEDULER_SCHNELL, "guidance_scale": 0.0, "guidance": None,
            "sigmas": [jfloat(s) for s in runs_s["f32"]["sigmas"]],
            "timesteps": [jfloat(t) for t in runs_s["f32"]["timesteps"]],
            "steps_f32": steps_json(runs_s["f32"]),
            "note": "same prompt, noise, text encoders and VAE as the dev run; transformer from base-schnell/",
        },
        "transformer_check": {
            "inputs": "tcheck.{hidden_states [1,24,64], encoder_hidden_states [1,7,32], pooled_projections [1,32], "
                      "timestep [1] = 0.625 (as passed: the model multiplies by 1000), guidance [1] = 4.0 (dev only; "
                      "also x1000 inside), img_ids [24,3] (0,row,col) of a 4x6 patch grid, txt_ids [7,3] zeros}; "
                      "random inputs are BF16-representable; each run casts all inputs to its dtype",
            "outputs": "tcheck.output_f32, tcheck.output_bf16 (dev); tcheck_schnell.output_f32, "
                       "tcheck_schnell.output_bf16 (schnell, no guidance)",
            "errors": tcheck,
        },
        "error_estimates": {"dev": errs(f32, f64, bf), "schnell": errs(runs_s["f32"], runs_s["f64"], runs_s["bf16"])},
        "dfloat11": {
            "package": "dfloat11==0.5.0", "call": "compress_model(model=pipe.transformer-equivalent (BF16), "
            "pattern_dict=PATTERN_DICT, save_path=..., save_single_file=False, check_correctness=False, "
            "block_range=(0, 100))",
            "pattern_dict": {k: list(v) for k, v in PATTERN_DICT.items()},
            "units": units, "units_schnell": units_s,
            "compressor_output": {"dev": cf, "schnell": cf_s},
        },
        "weights": {
            "init": ">=2-D: N(0,0.02); 1-D bias: N(0,0.02); 1-D weight: 1+0.1 N(0,1); rounded to BF16; numpy "
                    "default_rng(seed = first 8 bytes (little-endian) of sha256('<component>/<param name>'))",
            "one_d_weights": weights_log,
        },
        "tensors": {k: list(v.shape) for k, v in sorted(T.items())},
        "files": files,
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(J, f, indent=1)
        f.write("\n")
    os.chmod(os.path.join(out, "reference.json"), 0o644)
    print(json.dumps({"error_estimates": J["error_estimates"], "transformer_check": tcheck}, indent=1))
    print("done:", out)


if __name__ == "__main__":
    main()
