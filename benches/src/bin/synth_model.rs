//! Writes a BF16 Qwen3-shaped model folder with N(0, 0.02) weights (norm weights
//! 1 + 0.1·N(0, 1)), for end-to-end benchmarks on machines that cannot download real weights.
//! Non-weight files (tokenizer, generation config) and the base config come from a template
//! folder (e.g. a fixture); the dimensions are overridden.
//!
//! `synth_model --template tests/fixtures/models/qwen3-tiny/bf16 --out DIR` (Qwen3-8B shape by default)

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use df11_candle::{synth, RawTensor};
use half::bf16;
use safetensors::Dtype;

struct Dims {
    hidden: usize,
    intermediate: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    vocab: usize,
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn num(args: &[String], name: &str, default: usize) -> anyhow::Result<usize> {
    arg(args, name).map_or(Ok(default), |v| {
        v.parse().with_context(|| format!("{name} {v}"))
    })
}

fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn write(path: &Path, tensors: Vec<(String, Vec<usize>, Vec<bf16>)>) -> anyhow::Result<()> {
    let views: Vec<(String, RawTensor<'_>)> = tensors
        .iter()
        .map(|(n, shape, data)| {
            (
                n.clone(),
                RawTensor {
                    dtype: Dtype::BF16,
                    shape,
                    data: bytemuck::cast_slice(data),
                },
            )
        })
        .collect();
    let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    safetensors::serialize_to_file(views, Some(meta), path)?;
    Ok(())
}

fn matrix(name: &str, rows: usize, cols: usize) -> (String, Vec<usize>, Vec<bf16>) {
    (
        name.to_string(),
        vec![rows, cols],
        synth::normal_bf16(rows * cols, 0.02, seed_of(name)),
    )
}

fn norm(name: &str, n: usize) -> (String, Vec<usize>, Vec<bf16>) {
    let w = synth::normal_bf16(n, 0.1, seed_of(name));
    let w = w.iter().map(|x| bf16::from_f32(1.0 + x.to_f32())).collect();
    (name.to_string(), vec![n], w)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let template = PathBuf::from(arg(&args, "--template").context("--template DIR is required")?);
    let out = PathBuf::from(arg(&args, "--out").context("--out DIR is required")?);
    let d = Dims {
        hidden: num(&args, "--hidden", 4096)?,
        intermediate: num(&args, "--intermediate", 12288)?,
        layers: num(&args, "--layers", 36)?,
        heads: num(&args, "--heads", 32)?,
        kv_heads: num(&args, "--kv-heads", 8)?,
        head_dim: num(&args, "--head-dim", 128)?,
        vocab: num(&args, "--vocab", 151936)?,
    };
    std::fs::create_dir_all(&out)?;
    for e in std::fs::read_dir(&template)?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if e.path().is_file() && !name.ends_with(".safetensors") && name != "config.json" {
            std::fs::copy(e.path(), out.join(&name))?;
        }
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(template.join("config.json"))?)?;
    for (k, v) in [
        ("hidden_size", d.hidden),
        ("intermediate_size", d.intermediate),
        ("num_hidden_layers", d.layers),
        ("num_attention_heads", d.heads),
        ("num_key_value_heads", d.kv_heads),
        ("head_dim", d.head_dim),
        ("vocab_size", d.vocab),
    ] {
        config[k] = v.into();
    }
    config["tie_word_embeddings"] = false.into();
    // Qwen3-8B's context, so long-context runs are not capped by the template's.
    config["max_position_embeddings"] = 40_960.into();
    std::fs::write(
        out.join("config.json"),
        serde_json::to_string_pretty(&config)?,
    )?;

    let (h, q, kv) = (d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim);
    for l in 0..d.layers {
        let p = format!("model.layers.{l}");
        write(
            &out.join(format!("model-layer-{l:03}.safetensors")),
            vec![
                matrix(&format!("{p}.self_attn.q_proj.weight"), q, h),
                matrix(&format!("{p}.self_attn.k_proj.weight"), kv, h),
                matrix(&format!("{p}.self_attn.v_proj.weight"), kv, h),
                matrix(&format!("{p}.self_attn.o_proj.weight"), h, q),
                matrix(&format!("{p}.mlp.gate_proj.weight"), d.intermediate, h),
                matrix(&format!("{p}.mlp.up_proj.weight"), d.intermediate, h),
                matrix(&format!("{p}.mlp.down_proj.weight"), h, d.intermediate),
                norm(&format!("{p}.input_layernorm.weight"), h),
                norm(&format!("{p}.post_attention_layernorm.weight"), h),
                norm(&format!("{p}.self_attn.q_norm.weight"), d.head_dim),
                norm(&format!("{p}.self_attn.k_norm.weight"), d.head_dim),
            ],
        )?;
        eprintln!("layer {l} written");
    }
    write(
        &out.join("model-embed.safetensors"),
        vec![matrix("model.embed_tokens.weight", d.vocab, h)],
    )?;
    write(
        &out.join("model-head.safetensors"),
        vec![
            matrix("lm_head.weight", d.vocab, h),
            norm("model.norm.weight", h),
        ],
    )?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
