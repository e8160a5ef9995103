//! A FLUX transformer folder with synthetic weights, in diffusers' layout: BF16 N(0, 0.02)
//! matrices and biases, RMS-norm weights 1 + 0.1·N(0, 1), written one block a shard, and its
//! config; `df11 compress` (the library's `compress_model`) makes the DF11 folder from it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use df11_candle::{synth, RawTensor};
use flux_df11::FluxConfig;
use half::bf16;
use safetensors::Dtype;

/// A tensor to make: name, shape, and whether it is an RMS-norm weight.
pub struct Spec {
    pub name: String,
    pub shape: Vec<usize>,
    pub norm: bool,
}

/// The config of FLUX.1-dev (or schnell without the guidance embedding), with `layers` double-
/// and `single_layers` single-stream blocks.
pub fn config(layers: usize, single_layers: usize, guidance: bool) -> FluxConfig {
    FluxConfig {
        in_channels: 64,
        out_channels: None,
        patch_size: 1,
        num_layers: layers,
        num_single_layers: single_layers,
        attention_head_dim: 128,
        num_attention_heads: 24,
        joint_attention_dim: 4096,
        pooled_projection_dim: 768,
        guidance_embeds: guidance,
        axes_dims_rope: vec![16, 56, 56],
    }
}

/// The tensors of a `FluxTransformer2DModel` of `config`, by shard: the embedders and output
/// layers first, then one shard per block.
pub fn shards(config: &FluxConfig) -> Vec<Vec<Spec>> {
    let dim = config.inner_dim();
    let head = config.attention_head_dim;
    let mut shard = Vec::new();
    let linear = |shard: &mut Vec<Spec>, name: &str, out: usize, inp: usize| {
        shard.push(Spec {
            name: format!("{name}.weight"),
            shape: vec![out, inp],
            norm: false,
        });
        shard.push(Spec {
            name: format!("{name}.bias"),
            shape: vec![out],
            norm: false,
        });
    };
    let norm = |shard: &mut Vec<Spec>, name: &str| {
        shard.push(Spec {
            name: format!("{name}.weight"),
            shape: vec![head],
            norm: true,
        })
    };
    linear(&mut shard, "x_embedder", dim, config.in_channels);
    linear(
        &mut shard,
        "context_embedder",
        dim,
        config.joint_attention_dim,
    );
    let mut embedders = vec![
        ("timestep_embedder", 256),
        ("text_embedder", config.pooled_projection_dim),
    ];
    if config.guidance_embeds {
        embedders.push(("guidance_embedder", 256));
    }
    for (name, input) in embedders {
        let prefix = format!("time_text_embed.{name}");
        linear(&mut shard, &format!("{prefix}.linear_1"), dim, input);
        linear(&mut shard, &format!("{prefix}.linear_2"), dim, dim);
    }
    linear(&mut shard, "norm_out.linear", 2 * dim, dim);
    linear(&mut shard, "proj_out", config.out_channels(), dim);
    let mut out = vec![shard];
    for i in 0..config.num_layers {
        let p = format!("transformer_blocks.{i}");
        let mut s = Vec::new();
        linear(&mut s, &format!("{p}.norm1.linear"), 6 * dim, dim);
        linear(&mut s, &format!("{p}.norm1_context.linear"), 6 * dim, dim);
        for name in [
            "to_q",
            "to_k",
            "to_v",
            "add_q_proj",
            "add_k_proj",
            "add_v_proj",
        ] {
            linear(&mut s, &format!("{p}.attn.{name}"), dim, dim);
        }
        for name in ["norm_q", "norm_k", "norm_added_q", "norm_added_k"] {
            norm(&mut s, &format!("{p}.attn.{name}"));
        }
        linear(&mut s, &format!("{p}.attn.to_out.0"), dim, dim);
        linear(&mut s, &format!("{p}.attn.to_add_out"), dim, dim);
        for ff in ["ff", "ff_context"] {
            linear(&mut s, &format!("{p}.{ff}.net.0.proj"), 4 * dim, dim);
            linear(&mut s, &format!("{p}.{ff}.net.2"), dim, 4 * dim);
        }
        out.push(s);
    }
    for i in 0..config.num_single_layers {
        let p = format!("single_transformer_blocks.{i}");
        let mut s = Vec::new();
        linear(&mut s, &format!("{p}.norm.linear"), 3 * dim, dim);
        linear(&mut s, &format!("{p}.proj_mlp"), 4 * dim, dim);
        linear(&mut s, &format!("{p}.proj_out"), dim, 5 * dim);
        for name in ["to_q", "to_k", "to_v"] {
            linear(&mut s, &format!("{p}.attn.{name}"), dim, dim);
        }
        for name in ["norm_q", "norm_k"] {
            norm(&mut s, &format!("{p}.attn.{name}"));
        }
        out.push(s);
    }
    out
}

/// A seed per tensor name (FNV-1a), so every tensor is reproducible on its own.
fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The values of `spec`.
fn values(spec: &Spec) -> Vec<bf16> {
    let n = spec.shape.iter().product();
    if spec.norm {
        synth::normal_bf16(n, 0.1, seed_of(&spec.name))
            .into_iter()
            .map(|x| bf16::from_f32(1.0 + x.to_f32()))
            .collect()
    } else {
        synth::normal_bf16(n, 0.02, seed_of(&spec.name))
    }
}

/// Writes the BF16 transformer of `config` into `dir`: `config.json` (diffusers' fields) and
/// the shards with their index.
pub fn write_bf16(config: &FluxConfig, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let shards = shards(config);
    let n = shards.len();
    let mut weight_map = BTreeMap::new();
    let mut total = 0usize;
    for (i, shard) in shards.iter().enumerate() {
        let file = format!("diffusion_pytorch_model-{:05}-of-{n:05}.safetensors", i + 1);
        let data: Vec<Vec<bf16>> = shard.iter().map(values).collect();
        let views: Vec<(String, RawTensor<'_>)> = shard
            .iter()
            .zip(&data)
            .map(|(s, d)| {
                (
                    s.name.clone(),
                    RawTensor {
                        dtype: Dtype::BF16,
                        shape: &s.shape,
                        data: bytemuck::cast_slice(d),
                    },
                )
            })
            .collect();
        for s in shard {
            weight_map.insert(s.name.clone(), file.clone());
            total += 2 * s.shape.iter().product::<usize>();
        }
        let meta = [("format".to_string(), "pt".to_string())].into();
        safetensors::serialize_to_file(views, Some(meta), &dir.join(&file))
            .with_context(|| file.clone())?;
    }
    let index = serde_json::json!({
        "metadata": { "total_size": total },
        "weight_map": weight_map,
    });
    std::fs::write(
        dir.join("diffusion_pytorch_model.safetensors.index.json"),
        serde_json::to_string_pretty(&index)?,
    )?;
    let config_json = serde_json::json!({
        "_class_name": "FluxTransformer2DModel",
        "attention_head_dim": config.attention_head_dim,
        "axes_dims_rope": config.axes_dims_rope,
        "guidance_embeds": config.guidance_embeds,
        "in_channels": config.in_channels,
        "joint_attention_dim": config.joint_attention_dim,
        "num_attention_heads": config.num_attention_heads,
        "num_layers": config.num_layers,
        "num_single_layers": config.num_single_layers,
        "out_channels": null,
        "patch_size": config.patch_size,
        "pooled_projection_dim": config.pooled_projection_dim,
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config_json)?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};
    use df11_candle::{ModelWeights, WeightFormat};

    /// The tensors made here are the ones the transformer loads, with the shapes it checks:
    /// a small model of this layout, written, compressed and loaded both ways.
    #[test]
    fn a_synthetic_folder_loads_as_bf16_and_as_df11() {
        let mut config = config(1, 1, true);
        config.num_attention_heads = 2;
        config.attention_head_dim = 16;
        config.axes_dims_rope = vec![4, 6, 6];
        config.joint_attention_dim = 48;
        config.pooled_projection_dim = 40;
        let dir = tempfile::tempdir().unwrap();
        let bf16_dir = dir.path().join("bf16");
        write_bf16(&config, &bf16_dir).unwrap();
        assert_eq!(
            FluxConfig::open(&bf16_dir.join("config.json")).unwrap(),
            config
        );
        let df11_dir = dir.path().join("df11");
        df11_candle::compress_model(&bf16_dir, &df11_dir, &Default::default(), |_| {}).unwrap();
        for (folder, format) in [
            (&bf16_dir, WeightFormat::Dense),
            (&df11_dir, WeightFormat::Df11),
        ] {
            let weights = ModelWeights::open(folder, format, &Device::Cpu, DType::F32).unwrap();
            flux_df11::FluxTransformer::load(&config, &weights).unwrap();
        }
        // One compressed unit per block, as the official compressor writes them.
        let model = df11_candle::Df11Model::open(&df11_dir).unwrap();
        assert_eq!(model.units().len(), 2);
    }
}
