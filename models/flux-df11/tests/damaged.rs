//! Damaged FLUX folders: copies of the fixture's `df11/` and `base/` with one thing broken
//! each. Loading must refuse them with a typed error that names the file, tensor or field,
//! never panic.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use df11_candle::{Df11Options, WeightFormat};
use flux_df11::pipeline::{load_transformer, PipelineFolders};
use flux_df11::source::check_base_folder;
use flux_df11::{FluxError, FluxTransformer, SchedulerConfig, VaeDecoder};

/// Copies of the fixture's `df11/` and `base/`.
struct Copy {
    _tmp: tempfile::TempDir,
    df11: PathBuf,
    base: PathBuf,
}

fn fixture_copy() -> Copy {
    let tmp = tempfile::tempdir().unwrap();
    let (df11, base) = (tmp.path().join("df11"), tmp.path().join("base"));
    common::copy_dir(&common::fixture().join("df11"), &df11);
    common::copy_dir(&common::fixture().join("base"), &base);
    Copy {
        _tmp: tmp,
        df11,
        base,
    }
}

impl Copy {
    /// The DF11 transformer of the copy, on the CPU in f32.
    fn load(&self) -> flux_df11::Result<FluxTransformer> {
        let folders = PipelineFolders {
            transformer: &self.df11,
            format: WeightFormat::Df11,
            base: &self.base,
        };
        load_transformer(&folders, &Device::Cpu, DType::F32, Df11Options::default())
    }

    /// The error of loading the transformer, its text.
    fn load_error(&self) -> String {
        match self.load() {
            Ok(_) => panic!("the damaged folder loaded"),
            Err(e) => e.to_string(),
        }
    }

    /// Rewrites the safetensors file `file` of `df11/` through `edit`.
    fn edit_tensors(&self, file: &str, edit: impl FnOnce(&mut HashMap<String, Tensor>)) {
        let path = self.df11.join(file);
        let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        edit(&mut tensors);
        candle_core::safetensors::save(&tensors, &path).unwrap();
    }

    /// Sets `field` of the base transformer's config.json to `value`.
    fn set_config(&self, field: &str, value: serde_json::Value) {
        let path = self.base.join("transformer/config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config[field] = value;
        std::fs::write(&path, config.to_string()).unwrap();
    }
}

fn assert_names(text: &str, names: &[&str]) {
    eprintln!("{text}");
    for name in names {
        assert!(text.contains(name), "{name:?} not in: {text}");
    }
}

#[test]
fn the_undamaged_copy_loads() {
    fixture_copy().load().unwrap();
}

#[test]
fn truncated_weight_files_are_named() {
    for (file, keep) in [
        ("transformer_blocks_0.safetensors", 30000),
        ("single_transformer_blocks_1.safetensors", 100),
        ("diffusion_pytorch_model.safetensors", 5),
        ("diffusion_pytorch_model.safetensors", 0),
    ] {
        let c = fixture_copy();
        let path = c.df11.join(file);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..keep]).unwrap();
        assert_names(&c.load_error(), &[file]);
    }
}

#[test]
fn a_missing_or_broken_df11_config_is_named() {
    let c = fixture_copy();
    std::fs::remove_file(c.df11.join("config.json")).unwrap();
    assert_names(&c.load_error(), &["config.json"]);
    std::fs::write(c.df11.join("config.json"), "{\"dfloat11_config\": ").unwrap();
    assert_names(&c.load_error(), &["config.json"]);
    std::fs::write(c.df11.join("config.json"), "{}").unwrap();
    assert_names(&c.load_error(), &["config.json", "dfloat11_config"]);
}

#[test]
fn absurd_transformer_configs_are_named() {
    let cases: Vec<(&str, serde_json::Value, Vec<&str>)> = vec![
        // Block counts that disagree with the weights, both ways.
        (
            "num_layers",
            0.into(),
            vec!["num_layers", "transformer_blocks.0"],
        ),
        (
            "num_layers",
            1.into(),
            vec!["num_layers", "transformer_blocks.1"],
        ),
        (
            "num_layers",
            3.into(),
            vec!["num_layers", "transformer_blocks.2"],
        ),
        ("num_single_layers", 1000.into(), vec!["num_single_layers"]),
        ("num_layers", (1u64 << 40).into(), vec!["num_layers"]),
        ("num_layers", (-1).into(), vec!["config.json"]),
        ("num_layers", "two".into(), vec!["config.json"]),
        // Head sizes the weights do not have (the width 3 x 16 = 48, not 32).
        (
            "num_attention_heads",
            3.into(),
            vec!["transformer_blocks.0.", "has shape"],
        ),
        ("num_attention_heads", 0.into(), vec!["num_attention_heads"]),
        ("attention_head_dim", 0.into(), vec!["attention_head_dim"]),
        (
            "axes_dims_rope",
            serde_json::json!([4, 6, 8]),
            vec!["axes_dims_rope"],
        ),
        ("in_channels", 63.into(), vec!["x_embedder.weight"]),
        (
            "joint_attention_dim",
            (1u64 << 20).into(),
            vec!["joint_attention_dim"],
        ),
        ("patch_size", 2.into(), vec!["patch_size"]),
    ];
    for (field, value, names) in cases {
        let c = fixture_copy();
        c.set_config(field, value.clone());
        assert_names(&c.load_error(), &names);
    }
    // Heads x head size right, but the head size is not the weights' (8 instead of 16).
    let c = fixture_copy();
    c.set_config("num_attention_heads", 4.into());
    c.set_config("attention_head_dim", 8.into());
    c.set_config("axes_dims_rope", serde_json::json!([2, 2, 4]));
    assert_names(&c.load_error(), &["norm_q.weight"]);
    // No config at all.
    let c = fixture_copy();
    std::fs::remove_file(c.base.join("transformer/config.json")).unwrap();
    assert_names(&c.load_error(), &["transformer/config.json"]);
}

#[test]
fn a_missing_compressed_tensor_is_named() {
    for part in [
        "luts",
        "encoded_exponent",
        "sign_mantissa",
        "gaps",
        "output_positions",
        "split_positions",
    ] {
        let c = fixture_copy();
        let name = format!("transformer_blocks.0.{part}");
        c.edit_tensors("transformer_blocks_0.safetensors", |t| {
            t.remove(&name).unwrap();
        });
        assert_names(&c.load_error(), &["transformer_blocks.0"]);
    }
    // A plain tensor of a block, and one outside the blocks.
    for (file, name) in [
        (
            "transformer_blocks_0.safetensors",
            "transformer_blocks.0.attn.norm_q.weight",
        ),
        ("diffusion_pytorch_model.safetensors", "proj_out.bias"),
    ] {
        let c = fixture_copy();
        c.edit_tensors(file, |t| {
            t.remove(name).unwrap();
        });
        assert_names(&c.load_error(), &[name]);
    }
}

#[test]
fn wrong_shaped_tensors_are_named() {
    let bf16 = |shape: &[usize]| Tensor::zeros(shape, DType::BF16, &Device::Cpu).unwrap();
    let u8s = |shape: &[usize]| Tensor::zeros(shape, DType::U8, &Device::Cpu).unwrap();
    let cases: Vec<(&str, &str, Tensor)> = vec![
        (
            "diffusion_pytorch_model.safetensors",
            "x_embedder.weight",
            bf16(&[32, 63]),
        ),
        (
            "diffusion_pytorch_model.safetensors",
            "proj_out.bias",
            bf16(&[65]),
        ),
        (
            "transformer_blocks_0.safetensors",
            "transformer_blocks.0.attn.norm_q.weight",
            bf16(&[17]),
        ),
        (
            "transformer_blocks_0.safetensors",
            "transformer_blocks.0.ff.net.2.bias",
            bf16(&[31]),
        ),
        (
            "transformer_blocks_0.safetensors",
            "transformer_blocks.0.luts",
            u8s(&[4, 255]),
        ),
        (
            "transformer_blocks_0.safetensors",
            "transformer_blocks.0.sign_mantissa",
            u8s(&[36863]),
        ),
        (
            "single_transformer_blocks_0.safetensors",
            "single_transformer_blocks.0.split_positions",
            Tensor::zeros(4, DType::I64, &Device::Cpu).unwrap(),
        ),
    ];
    for (file, name, tensor) in cases {
        let c = fixture_copy();
        c.edit_tensors(file, |t| {
            t.insert(name.to_string(), tensor);
        });
        let unit = name.rsplit_once('.').unwrap().0;
        let text = c.load_error();
        eprintln!("{text}");
        assert!(text.contains(name) || text.contains(unit), "{name}: {text}");
    }
}

#[test]
fn missing_or_broken_base_pieces_are_named() {
    let c = fixture_copy();
    let name = "the base";
    std::fs::remove_file(c.base.join("scheduler/scheduler_config.json")).unwrap();
    let e = check_base_folder(&c.base, name, false).unwrap_err();
    assert_names(&e.to_string(), &[name, "scheduler/scheduler_config.json"]);
    let e = SchedulerConfig::open(&c.base.join("scheduler/scheduler_config.json")).unwrap_err();
    assert!(matches!(e, FluxError::Config { .. }), "{e:?}");
    assert_names(&e.to_string(), &["scheduler_config.json"]);

    let c = fixture_copy();
    std::fs::remove_file(c.base.join("vae/diffusion_pytorch_model.safetensors")).unwrap();
    let e = check_base_folder(&c.base, name, false).unwrap_err();
    assert_names(&e.to_string(), &["vae/*.safetensors"]);
    let e = VaeDecoder::load(&c.base.join("vae"), &Device::Cpu, DType::F32).unwrap_err();
    assert_names(&e.to_string(), &["vae"]);

    let c = fixture_copy();
    let path = c.base.join("vae/config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["latent_channels"] = 0.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let e = VaeDecoder::load(&c.base.join("vae"), &Device::Cpu, DType::F32).unwrap_err();
    assert_names(&e.to_string(), &["vae/config.json", "latent_channels"]);

    let c = fixture_copy();
    let vae = c.base.join("vae/diffusion_pytorch_model.safetensors");
    let bytes = std::fs::read(&vae).unwrap();
    std::fs::write(&vae, &bytes[..bytes.len() / 2]).unwrap();
    let e = VaeDecoder::load(&c.base.join("vae"), &Device::Cpu, DType::F32).unwrap_err();
    assert_names(&e.to_string(), &["diffusion_pytorch_model.safetensors"]);

    let c = fixture_copy();
    std::fs::write(
        c.base.join("scheduler/scheduler_config.json"),
        "{\"shift\": -1}",
    )
    .unwrap();
    let e = SchedulerConfig::open(&c.base.join("scheduler/scheduler_config.json")).unwrap_err();
    assert_names(&e.to_string(), &["scheduler_config.json", "shift"]);
}
