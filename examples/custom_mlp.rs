//! A custom candle model on DF11 weights: the SwiGLU MLP of one transformer layer, whose three
//! linears stay DF11-compressed in memory and are decoded just before each matmul.
//!
//! It loads the MLP twice, from a bundled fixture's `df11/` folder and from its `bf16/` original,
//! runs both on the same input and checks that the outputs are bit-identical. It also builds the
//! `down_proj` directly from a `Df11Group` (the lower-level route).
//!
//!     cargo run --example custom_mlp [-- MODEL [LAYER]]
//!     cargo run --example custom_mlp --features df11-candle/cuda     # on a GPU
//!
//! MODEL is a fixture under `tests/fixtures/models` (default `qwen3-tiny`; also `llama-tiny`,
//! `mistral-nemo-tiny`, `qwen2-tiny`, `qwen3-tied-tiny`), LAYER defaults to 0.

use std::error::Error;
use std::path::PathBuf;

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{Df11Group, Df11Linear, Df11Model, Linear, ModelWeights, WeightFormat};

/// `down(silu(gate(x)) * up(x))`, with linears from either kind of folder.
struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    fn load(
        w: &ModelWeights,
        prefix: &str,
        hidden: usize,
        inter: usize,
    ) -> df11_candle::Result<Self> {
        Ok(Self {
            gate: w.linear(&format!("{prefix}.gate_proj"), inter, hidden, false)?,
            up: w.linear(&format!("{prefix}.up_proj"), inter, hidden, false)?,
            down: w.linear(&format!("{prefix}.down_proj"), hidden, inter, false)?,
        })
    }
}

impl Mlp {
    /// Whether all three weights are DF11-compressed (decoded only inside `forward`).
    fn is_compressed(&self) -> bool {
        [&self.gate, &self.up, &self.down]
            .iter()
            .all(|l| matches!(l, Linear::Df11(l) if l.is_compressed()))
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = (self.gate.forward(x)?.silu()? * self.up.forward(x)?)?;
        self.down.forward(&h)
    }
}

/// `tests/fixtures/models/<model>/<kind>` of the workspace, from `CARGO_MANIFEST_DIR`.
fn fixture(model: &str, kind: &str) -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let dir = PathBuf::from(manifest)
        .join("../../tests/fixtures/models")
        .join(model)
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

fn bits(t: &Tensor) -> candle_core::Result<Vec<u32>> {
    let v: Vec<f32> = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    Ok(v.iter().map(|x| x.to_bits()).collect())
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| "qwen3-tiny".into());
    let layer: usize = args.next().map_or(Ok(0), |s| s.parse())?;
    let device = device()?;
    let dtype = if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    };

    let df11_dir = fixture(&model, "df11");
    let config_path = df11_dir.join("config.json");
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&config_path).map_err(|e| format!("{}: {e}", config_path.display()))?,
    )?;
    let size = |key: &str| {
        config[key]
            .as_u64()
            .map(|v| v as usize)
            .ok_or_else(|| format!("config.json has no `{key}`"))
    };
    let (hidden, inter) = (size("hidden_size")?, size("intermediate_size")?);
    let prefix = format!("model.layers.{layer}.mlp");
    println!(
        "{model}: {prefix} (hidden {hidden}, intermediate {inter}) on {device:?} in {dtype:?}"
    );

    // The same model code on both folders.
    let df11 = ModelWeights::open(&df11_dir, WeightFormat::Df11, &device, dtype)?;
    let bf16 = ModelWeights::open(
        &fixture(&model, "bf16"),
        WeightFormat::Dense,
        &device,
        dtype,
    )?;
    let mlp_df11 = Mlp::load(&df11, &prefix, hidden, inter)?;
    let mlp_bf16 = Mlp::load(&bf16, &prefix, hidden, inter)?;
    // Otherwise the comparison below would compare BF16 with BF16.
    if !mlp_df11.is_compressed() {
        return Err(format!("{prefix}: the DF11 folder's linears are not DF11-compressed").into());
    }

    let x = (Tensor::arange(0u32, (4 * hidden) as u32, &device)?
        .to_dtype(DType::F32)?
        .reshape((4, hidden))?
        * 0.37)?
        .sin()?
        .to_dtype(dtype)?;
    let y_df11 = mlp_df11.forward(&x)?;
    let y_bf16 = mlp_bf16.forward(&x)?;
    let identical = bits(&y_df11)? == bits(&y_bf16)?;
    println!(
        "output {:?}; DF11 vs BF16 bit-identical: {identical}",
        y_df11.dims()
    );
    let weights = df11
        .df11_model()
        .and_then(|m| m.unit(&format!("model.layers.{layer}")))
        .map_or(0, |u| u.layout.n_elements);
    println!(
        "layer unit on the device: {} bytes compressed, {} bytes in BF16 ({:.1}%)",
        df11.loaded_unit_bytes(),
        2 * weights,
        100.0 * df11.loaded_unit_bytes() as f64 / (2 * weights).max(1) as f64
    );

    // Lower level: the unit on the device, one member as a linear.
    let m = Df11Model::open(&df11_dir)?;
    let name = format!("{prefix}.down_proj.weight");
    let (unit, member) = m
        .find_member(&name)
        .ok_or_else(|| format!("`{name}` is not compressed in {}", df11_dir.display()))?;
    let group = Df11Group::load(&m, unit, &device, &df11_candle::UnitPlacement::default())?;
    let down = Df11Linear::new(group, member, hidden, inter, None, dtype)?;
    let h = (mlp_bf16.gate.forward(&x)?.silu()? * mlp_bf16.up.forward(&x)?)?;
    let direct_identical = bits(&down.forward(&h)?)? == bits(&y_bf16)?;
    println!(
        "down_proj from Df11Group (unit `{}`, member {member}): bit-identical: {direct_identical}",
        unit.name
    );

    if !(identical && direct_identical) {
        return Err("DF11 and BF16 outputs differ".into());
    }
    Ok(())
}
