//! Shared helpers for the integration tests: fixture paths and comparisons; `damage` and
//! `roundtrip` hold the helpers of the `damaged_*.rs` and codec round-trip tests.
#![allow(dead_code)]

pub mod damage;
pub mod products;
pub mod roundtrip;

use rand::rngs::StdRng;
use rand::SeedableRng;

/// The fixture models bundled in `tests/fixtures/models`.
pub const MODELS: [&str; 7] = [
    "qwen3-tiny",
    "qwen3-tied-tiny",
    "llama-tiny",
    "mistral-nemo-tiny",
    "qwen2-tiny",
    "gemma3-tiny",
    "phi4-tiny",
];

// Each test binary uses what it needs of these.
#[allow(unused_imports)]
pub use df11_candle::fixtures::{fixtures, model_dir};

/// A fresh temporary folder.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary folder")
}

/// The device tests run on: CUDA device 0 when built with the `cuda` feature (the GPU suite),
/// else the CPU. With `cuda` on and no GPU, this fails loudly rather than quietly testing the CPU.
pub fn device() -> candle_core::Device {
    #[cfg(feature = "cuda")]
    {
        candle_core::Device::new_cuda(0).expect("the cuda feature is on but no CUDA device opened")
    }
    #[cfg(not(feature = "cuda"))]
    {
        candle_core::Device::Cpu
    }
}

/// A fresh random seed, printed so a failure can be replayed with `DF11_TEST_SEED`.
pub fn seed() -> u64 {
    let s = std::env::var("DF11_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("seed: {s} (set DF11_TEST_SEED={s} to replay)");
    s
}

/// A fresh seed per test (or `DF11_TEST_SEED` to replay one), printed so it shows with a failure,
/// and a generator seeded with it.
pub fn seeded(test: &str) -> (u64, StdRng) {
    let seed = std::env::var("DF11_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("{test}: seed {seed} (replay with DF11_TEST_SEED={seed})");
    (seed, StdRng::seed_from_u64(seed))
}

/// The options of a test: the `DF11_*` variables' (the GPU suite's variants set them), else the
/// defaults.
#[allow(dead_code)]
pub fn options() -> df11_candle::Df11Options {
    df11_candle::Df11Options::from_vars(|n| std::env::var(n).ok())
        .unwrap_or_else(|e| panic!("the test's DF11 variables: {e}"))
}

/// The real Qwen3-4B slice (`canary/qwen3-4b-layer0-slice.safetensors`: one unit's six arrays
/// under their bare names, and `expected_bf16`).
pub fn canary_index() -> df11_candle::SafetensorsIndex {
    let path = fixtures().join("canary/qwen3-4b-layer0-slice.safetensors");
    df11_candle::SafetensorsIndex::open_files(&[path]).unwrap()
}

/// The slice's unit tensors.
pub fn canary_unit(idx: &df11_candle::SafetensorsIndex) -> df11_candle::UnitTensors<'_> {
    let get = |n: &str| idx.get(n).unwrap().data;
    df11_candle::UnitTensors {
        encoded_exponent: get("encoded_exponent"),
        sign_mantissa: get("sign_mantissa"),
        luts: get("luts"),
        gaps: get("gaps"),
        output_positions: get("output_positions"),
        split_positions: get("split_positions"),
    }
}
