#!/usr/bin/env python3
"""Convert DF11 safetensors units into raw unit directories for the CUDA harness (stdlib only).

Each unit directory gets:
  luts.bin (K*256 u8), encoded_exponent.bin, sign_mantissa.bin, gaps.bin,
  output_positions.bin (little-endian u32 array), expected.bin (u16 BF16 bits, little-endian).

Usage:
  export_fixture.py OUT_DIR                      # canary + every unit of every fixture model
  export_fixture.py OUT_DIR --fixtures ROOT       # ROOT defaults to /work/shared/fixtures

Expected BF16 comes from the model's bf16/model.safetensors: the unit's member weights
concatenated in pattern_dict order (or `<group>.weight` for an empty member list), or from the
canary's `expected_bf16` tensor.
"""
import json
import os
import re
import struct
import sys


def read_safetensors(path):
    """Return {name: (dtype, shape, bytes)} for every tensor in the file."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        s, e = meta["data_offsets"]
        out[name] = (meta["dtype"], meta["shape"], data[base + s:base + e])
    return out


def write_unit(out_dir, name, luts, codes, sm, gaps, positions, expected):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    for fname, blob in (("luts.bin", luts), ("encoded_exponent.bin", codes),
                        ("sign_mantissa.bin", sm), ("gaps.bin", gaps),
                        ("output_positions.bin", positions), ("expected.bin", expected)):
        with open(os.path.join(d, fname), "wb") as f:
            f.write(blob)
    n = len(expected) // 2
    assert len(sm) == n, (name, len(sm), n)
    print(f"wrote {d}: n={n} n_bytes={len(codes)} K={len(luts) // 256} "
          f"positions={len(positions) // 4}")


def export_canary(root, out_dir):
    t = read_safetensors(os.path.join(root, "canary", "qwen3-4b-layer0-slice.safetensors"))
    g = lambda k: t[k][2]
    write_unit(out_dir, "canary_qwen3_4b_slice", g("luts"), g("encoded_exponent"),
               g("sign_mantissa"), g("gaps"), g("output_positions"), g("expected_bf16"))


def export_model(root, model, out_dir):
    mdir = os.path.join(root, "models", model)
    # LLM fixtures: df11/ and its original bf16/; the FLUX fixture: each DF11 transformer and
    # its BF16 original in the diffusers pipeline folder.
    if os.path.isdir(os.path.join(mdir, "bf16")):
        pairs = [("df11", "bf16")]
    else:
        pairs = [("df11", "base/transformer"), ("df11-schnell", "base-schnell/transformer")]
    for df11_dir, bf16_dir in pairs:
        if os.path.isdir(os.path.join(mdir, df11_dir)):
            export_pair(os.path.join(mdir, df11_dir), os.path.join(mdir, bf16_dir),
                        model if df11_dir == "df11" else f"{model}_{df11_dir}", out_dir)


def export_pair(df11_path, bf16_path, prefix, out_dir):
    cfg = json.load(open(os.path.join(df11_path, "config.json")))
    pattern = cfg["dfloat11_config"]["pattern_dict"]
    bf16 = {}
    for fn in sorted(os.listdir(bf16_path)):
        if fn.endswith(".safetensors"):
            bf16.update(read_safetensors(os.path.join(bf16_path, fn)))
    df11 = {}
    for fn in sorted(os.listdir(df11_path)):
        if fn.endswith(".safetensors"):
            df11.update(read_safetensors(os.path.join(df11_path, fn)))
    groups = sorted({k[:-len(".encoded_exponent")] for k in df11 if k.endswith(".encoded_exponent")})
    for grp in groups:
        keys = [k for k in pattern if re.fullmatch(k, grp)]
        assert len(keys) == 1, (grp, keys)
        members = pattern[keys[0]]
        names = [grp + ".weight"] if not members else [f"{grp}.{m}.weight" for m in members]
        for nm in names:
            assert bf16[nm][0] == "BF16", nm
        expected = b"".join(bf16[nm][2] for nm in names)
        g = lambda f: df11[f"{grp}.{f}"][2]
        write_unit(out_dir, f"{prefix}__{grp.replace('.', '_')}", g("luts"), g("encoded_exponent"),
                   g("sign_mantissa"), g("gaps"), g("output_positions"), expected)


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        sys.exit(2)
    out_dir = args[0]
    root = "/work/shared/fixtures"
    if "--fixtures" in args:
        root = args[args.index("--fixtures") + 1]
    os.makedirs(out_dir, exist_ok=True)
    export_canary(root, out_dir)
    for model in sorted(os.listdir(os.path.join(root, "models"))):
        export_model(root, model, out_dir)


if __name__ == "__main__":
    main()
