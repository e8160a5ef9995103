//! candle-transformers' own Qwen3, unmodified, loaded from a DF11 folder through
//! [`Df11Backend`], generating a few tokens greedily. The same model is loaded from the BF16
//! original with candle's safetensors `VarBuilder`, and the two must pick the same tokens.
//!
//!     cargo run --example candle_transformers_qwen3 [-- PROMPT [N]]
//!     cargo run --example candle_transformers_qwen3 --features df11-candle/cuda   # on a GPU
//!
//! It runs on the bundled `tests/fixtures/models/qwen3-tiny` (random weights: the text is
//! gibberish; the point is the loading path). Set `DF11_MODEL_DIR` to another DF11 Qwen3 folder
//! (with its `tokenizer.json`) to run a real one; the BF16 comparison then needs
//! `DF11_BF16_DIR`, or is skipped.
//!
//! This path keeps every weight decoded in memory (BF16-sized); the `qwen3-df11` crate runs Qwen3
//! with its weights compressed in memory.

use std::error::Error;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::qwen3;
use df11_candle::Df11Backend;
use tokenizers::Tokenizer;

/// `tests/fixtures/models/qwen3-tiny/<kind>` of the workspace, from `CARGO_MANIFEST_DIR`.
fn fixture(kind: &str) -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let dir = PathBuf::from(manifest)
        .join("../../tests/fixtures/models/qwen3-tiny")
        .join(kind);
    dir.canonicalize().unwrap_or(dir)
}

/// CUDA device 0 with the `cuda` feature, else the CPU.
fn device() -> candle_core::Result<Device> {
    #[cfg(feature = "cuda")]
    {
        Device::new_cuda(0)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Ok(Device::Cpu)
    }
}

/// Greedy decoding with the KV cache: `n` new token ids (stops early at `eos`).
fn generate(
    model: &mut qwen3::ModelForCausalLM,
    prompt: &[u32],
    n: usize,
    eos: Option<u32>,
    device: &Device,
) -> candle_core::Result<Vec<u32>> {
    let mut out = Vec::with_capacity(n);
    let mut input = prompt.to_vec();
    let mut offset = 0;
    for _ in 0..n {
        let x = Tensor::new(input.as_slice(), device)?.unsqueeze(0)?;
        let logits = model.forward(&x, offset)?.flatten_all()?;
        let next = logits.argmax(0)?.to_scalar::<u32>()?;
        offset += input.len();
        out.push(next);
        if Some(next) == eos {
            break;
        }
        input = vec![next];
    }
    Ok(out)
}

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let prompt = args
        .next()
        .unwrap_or_else(|| "A binary search tree keeps".into());
    let n: usize = args.next().map_or(Ok(8), |s| s.parse())?;
    let device = device()?;
    let dtype = if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    };
    let (df11_dir, bf16_dir) = match std::env::var_os("DF11_MODEL_DIR") {
        Some(d) => (
            PathBuf::from(d),
            std::env::var_os("DF11_BF16_DIR").map(PathBuf::from),
        ),
        None => (fixture("df11"), Some(fixture("bf16"))),
    };

    let config_path = df11_dir.join("config.json");
    let config_text = std::fs::read_to_string(&config_path)
        .map_err(|e| format!("{}: {e}", config_path.display()))?;
    let config: qwen3::Config = serde_json::from_str(&config_text)?;
    let eos = serde_json::from_str::<serde_json::Value>(&config_text)?["eos_token_id"]
        .as_u64()
        .map(|v| v as u32);
    let tokenizer = Tokenizer::from_file(df11_dir.join("tokenizer.json"))?;
    let ids = tokenizer.encode(prompt.as_str(), true)?.get_ids().to_vec();

    let t = std::time::Instant::now();
    let backend = Df11Backend::open(&df11_dir)?;
    let vb = backend.clone().into_var_builder(dtype, &device);
    let mut model = qwen3::ModelForCausalLM::new(&config, vb)?;
    println!(
        "{}: loaded through Df11Backend on {device:?} in {dtype:?} ({} units decoded, {:.0} ms)",
        df11_dir.display(),
        backend.units_decoded(),
        t.elapsed().as_secs_f64() * 1e3
    );

    // Every unit was decoded at least once (a unit may be decoded again when its weights are
    // asked for out of order).
    if backend.units_decoded() < backend.model().units().len() {
        return Err(format!(
            "only {} decodes for {} DF11 units at load",
            backend.units_decoded(),
            backend.model().units().len()
        )
        .into());
    }

    let tokens = generate(&mut model, &ids, n, eos, &device)?;
    println!("prompt ids: {ids:?}");
    println!("generated ids: {tokens:?}");
    println!("text: {prompt}{}", tokenizer.decode(&tokens, false)?);

    if let Some(bf16_dir) = bf16_dir {
        let file = bf16_dir.join("model.safetensors");
        let files = if Path::new(&file).exists() {
            vec![file]
        } else {
            safetensors_files(&bf16_dir)?
        };
        // SAFETY: the files are not modified while the model loads.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, &device)? };
        let mut reference = qwen3::ModelForCausalLM::new(&config, vb)?;
        let expected = generate(&mut reference, &ids, n, eos, &device)?;
        println!(
            "BF16 original ({}): same tokens: {}",
            bf16_dir.display(),
            expected == tokens
        );
        if expected != tokens {
            return Err(format!("BF16 original generated {expected:?}").into());
        }
    }
    Ok(())
}

/// The `*.safetensors` files of a sharded folder.
fn safetensors_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    Ok(files)
}
