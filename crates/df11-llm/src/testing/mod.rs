//! The model test harness: every model crate runs the same tests on its fixtures, declared in
//! one line with [`model_tests!`](crate::model_tests):
//!
//! - [`reference`](mod@reference): against transformers' f32 `reference.json` (prompt ids, last logits of the
//!   DF11 and BF16 folders, token-by-token and chunked prefill through the KV cache, the argmax
//!   of every position, greedy tokens, BF16 compute, the chat template);
//! - [`exact`]: DF11 == BF16 logits bit for bit on the test device, the tie read from the config;
//! - [`errors`]: typed load errors (missing folder or files, another architecture, the wrong
//!   format, legacy pickle repos, unsupported configs);
//! - [`split`]: the model split over several devices, or with layers offloaded to host
//!   memory, == the model on one device, bit for bit;
//! - [`cli`]: the model binary end to end (JSON greedy output, `--bf16`, the chat template,
//!   streamed text and report, the Hub cache, errors with their messages).
//!
//! Everything here panics on missing data: a test must not pass without it.

pub mod cli;
pub mod errors;
pub mod exact;
pub mod reference;
pub mod split;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde_json::Value;

use df11_candle::{ModelWeights, WeightFormat};

use crate::app::{load, Architecture, LoadOptions, Loaded};
use crate::config::ModelConfig;
use crate::error::Result;
use crate::model::DecoderModel;
use crate::progress::LoadBar;
use crate::source::ModelSource;
use crate::spec::ModelSpec;

/// An architecture under test: its name and loader, the fixtures it runs, and its binary.
#[derive(Debug, Clone)]
pub struct ModelUnderTest {
    /// `Architecture::NAME`.
    pub name: &'static str,
    /// `Architecture::MODEL_TYPES`.
    pub model_types: &'static [&'static str],
    /// `Architecture::DEFAULT_REPO`.
    pub default_repo: &'static str,
    /// `df11_llm::load::<A>`.
    pub load: fn(&LoadOptions) -> Result<Loaded>,
    /// `A::spec`: the model's spec from its config.
    pub spec: fn(&ModelConfig, &ModelWeights) -> Result<ModelSpec>,
    /// `A::load`: the model from a config and weights opened on any device.
    pub build: fn(&ModelConfig, &ModelWeights, &LoadBar) -> Result<DecoderModel>,
    /// The fixtures of this architecture (`tests/fixtures/models/<name>`).
    pub fixtures: &'static [&'static str],
    /// The model binary ([`binary`]).
    pub binary: PathBuf,
    /// How the tests open weights (the defaults, or the test binary's `DF11_*` variables:
    /// [`Self::with_vars`]).
    pub weights: df11_candle::Df11Options,
    /// How the tests' models run decode steps (likewise).
    pub decode: crate::model::DecodeOptions,
}

impl ModelUnderTest {
    /// Architecture `A` on `fixtures`, its binary at `binary`.
    pub fn of<A: Architecture>(fixtures: &'static [&'static str], binary: PathBuf) -> Self {
        assert!(!fixtures.is_empty(), "{}: no fixture to test", A::NAME);
        Self {
            name: A::NAME,
            model_types: A::MODEL_TYPES,
            default_repo: A::DEFAULT_REPO,
            load: load::<A>,
            spec: A::spec,
            build: A::load,
            fixtures,
            binary,
            weights: Default::default(),
            decode: Default::default(),
        }
    }

    /// The options the `DF11_*` variables of `vars` set (the test binary reads its environment
    /// and hands it over: the GPU suite's variants set them); panics on a bad value.
    pub fn with_vars(mut self, vars: impl Fn(&str) -> Option<String>) -> Self {
        let bad = "the test's DF11 variables";
        self.weights =
            df11_candle::Df11Options::from_vars(&vars).unwrap_or_else(|e| panic!("{bad}: {e}"));
        self.decode =
            crate::model::DecodeOptions::from_vars(&vars).unwrap_or_else(|e| panic!("{bad}: {e}"));
        self
    }

    /// A fixture's DF11 folder opened on `device` in the compute dtype the tests use there
    /// (BF16 on CUDA, f32 on the CPU): its prompt, config and weights.
    pub fn open_df11(&self, name: &str, device: &Device) -> (Vec<u32>, ModelConfig, ModelWeights) {
        let dtype = if device.is_cuda() {
            DType::BF16
        } else {
            DType::F32
        };
        let prompt = ids(&reference(name)["prompt_ids"]);
        let dir = model_dir(name, "df11");
        let config = ModelConfig::open(&dir).unwrap();
        let weights = self.open_weights(&dir, WeightFormat::Df11, device, dtype);
        (prompt, config, weights)
    }

    /// `dir` opened as `format` on `device` in `dtype`, with the test's weight options.
    pub fn open_weights(
        &self,
        dir: &Path,
        format: WeightFormat,
        device: &Device,
        dtype: DType,
    ) -> ModelWeights {
        ModelWeights::open_with(dir, format, device, dtype, self.weights)
            .unwrap_or_else(|e| panic!("opening {}: {e}", dir.display()))
    }

    /// The model of `config` on `weights`, running by the test's decode options.
    pub fn built(&self, config: &ModelConfig, weights: &ModelWeights) -> Result<DecoderModel> {
        let mut model = (self.build)(config, weights, &LoadBar::hidden())?;
        model.set_options(self.decode.clone())?;
        Ok(model)
    }

    /// Loads `dir` on the CPU (`bf16`: as a plain BF16 folder), or the error.
    pub fn try_load(&self, dir: &Path, bf16: bool, dtype: DType) -> Result<Loaded> {
        (self.load)(&LoadOptions {
            source: ModelSource::Local(dir.to_path_buf()),
            bf16,
            device: Device::Cpu,
            split: None,
            offload: Default::default(),
            dtype,
            show_progress: false,
            weights: self.weights,
            decode: self.decode.clone(),
        })
    }

    /// Loads `dir` on the CPU; panics with the error.
    pub fn load_dir(&self, dir: &Path, bf16: bool, dtype: DType) -> Loaded {
        self.try_load(dir, bf16, dtype)
            .unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()))
    }

    /// Loads fixture `name`, DF11 (`kind` = `df11`) or BF16 (`bf16`), on the CPU.
    pub fn load_fixture(&self, name: &str, kind: &str, dtype: DType) -> Loaded {
        self.load_dir(&model_dir(name, kind), kind == "bf16", dtype)
    }

    /// The fixtures of other architectures (found by their config's `model_type`), with their
    /// `architectures[0]`.
    pub fn other_architectures(&self) -> Vec<(String, String)> {
        let mut others = Vec::new();
        let models = fixtures().join("models");
        let mut names: Vec<_> = std::fs::read_dir(&models)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let config = models.join(&name).join("df11/config.json");
            let Ok(text) = std::fs::read_to_string(&config) else {
                continue;
            };
            let json: Value = serde_json::from_str(&text).unwrap();
            // LLM fixtures only: a diffusion transformer's DF11 config names no architecture.
            let (Some(model_type), Some(arch)) = (
                json["model_type"].as_str(),
                json["architectures"][0].as_str(),
            ) else {
                continue;
            };
            if !self.model_types.contains(&model_type) {
                others.push((name, arch.to_string()));
            }
        }
        assert!(!others.is_empty(), "no fixture of another architecture");
        others
    }
}

/// Declares the shared model tests (see [`crate::testing`]) for architecture `$arch`, its binary
/// `$bin` (the package's `[[bin]]` name), its fixtures, and the variables the tests take their
/// options from (`$vars`: `Fn(&str) -> Option<String>`, the test binary's environment: the GPU
/// suite's variants set `DF11_*`; [`ModelUnderTest::with_vars`]).
///
/// ```ignore
/// // tests/model.rs: `test_vars` looks a name up in the test binary's environment.
/// df11_llm::model_tests!(
///     qwen3_df11::Qwen3Arch,
///     "qwen3-df11",
///     ["qwen3-tiny", "qwen3-tied-tiny"],
///     test_vars
/// );
/// ```
#[macro_export]
macro_rules! model_tests {
    ($arch:ty, $bin:literal, [$($fixture:literal),+ $(,)?], $vars:expr $(,)?) => {
        fn model_under_test() -> $crate::testing::ModelUnderTest {
            $crate::testing::ModelUnderTest::of::<$arch>(
                &[$($fixture),+],
                $crate::testing::binary($bin, env!(concat!("CARGO_BIN_EXE_", $bin))),
            )
            .with_vars($vars)
        }
        $crate::model_tests!(@tests model_under_test;
            reference::prompt_ids_match_the_reference_tokenizer,
            reference::last_logits_match_the_f32_reference,
            reference::token_by_token_and_chunked_prefill_match_the_reference,
            reference::greedy_tokens_match_the_reference,
            reference::bf16_compute_is_close_to_the_reference,
            reference::chat_template_matches_transformers,
            exact::df11_logits_equal_bf16_logits_bit_for_bit,
            exact::tie_is_read_from_the_config,
            exact::decode_paths_agree,
            exact::decode_ahead_is_exact,
            exact::engine_batches_equal_single_runs,
            split::split_layers_equal_one_device,
            split::offloaded_layers_equal_resident,
            errors::missing_folder,
            errors::another_architecture,
            errors::wrong_format_either_way,
            errors::missing_tokenizer_config_and_weights,
            errors::legacy_pickle_repo_is_named_as_such,
            errors::unsupported_configs_are_invalid_config,
            errors::out_of_range_configs_are_refused,
            cli::local_folder_greedy_json_matches_the_reference_and_bf16,
            cli::chat_template_prompt_ids_match_transformers,
            cli::streamed_text_and_report,
            cli::hub_cache_offline_default_repo_and_unreachable_hub,
            cli::errors_exit_non_zero_with_a_message,
        );
    };
    (@tests $mut:ident; $($module:ident :: $test:ident),+ $(,)?) => {
        mod shared {
            $(
                #[test]
                fn $test() {
                    $crate::testing::$module::$test(&super::$mut());
                }
            )+
        }
    };
}

/// The path of binary `name` for an end-to-end test: `built`, the path cargo compiled in
/// (`env!("CARGO_BIN_EXE_<name>")`), where it exists, else `name` beside the running test
/// binary (test binaries carried to another machine with the model binaries, e.g. the GPU
/// suite's) or in the folder above it (cargo's `deps/`).
pub fn binary(name: &str, built: &str) -> PathBuf {
    let built = PathBuf::from(built);
    if built.is_file() {
        return built;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("the test binary's path: {e}"));
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "binary `{name}` not found: not at {} nor beside {}",
                built.display(),
                exe.display()
            )
        })
}

pub use df11_candle::fixtures::{fixtures, model_dir};

/// The fixture's reference.json.
pub fn reference(name: &str) -> Value {
    let path = fixtures().join("models").join(name).join("reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("reference.json parses")
}

/// A JSON array of integers.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// A JSON array of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array of numbers")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

/// `[1, seq]` u32 ids on the CPU.
pub fn input(ids: &[u32]) -> Tensor {
    input_on(ids, &Device::Cpu)
}

/// `[1, seq]` u32 ids on `device`.
pub fn input_on(ids: &[u32], device: &Device) -> Tensor {
    Tensor::new(ids, device).unwrap().unsqueeze(0).unwrap()
}

/// The device of the device-level tests: CUDA device 0 when built with the `cuda` feature (the
/// GPU suite), else the CPU. With `cuda` on and no GPU this fails loudly.
pub fn test_device() -> Device {
    #[cfg(feature = "cuda")]
    {
        crate::device::open_cuda(0).expect("the cuda feature is on but no CUDA device opened")
    }
    #[cfg(not(feature = "cuda"))]
    {
        Device::Cpu
    }
}

/// The reference greedy tokens that can be compared: up to (excluding) the first step whose
/// recorded top-1/top-2 margin is below `min_margin`.
pub fn comparable_greedy(reference: &Value, min_margin: f64) -> Vec<u32> {
    let greedy = &reference["greedy"];
    let tokens = ids(&greedy["tokens"]);
    let margins = floats(&greedy["margins"]);
    assert_eq!(tokens.len(), margins.len());
    let n = margins
        .iter()
        .position(|m| *m < min_margin)
        .unwrap_or(tokens.len());
    tokens[..n].to_vec()
}

/// A copy of folder `src` in a temporary folder, without the file `skip` (`""`: none), its
/// `config.json` changed by `edit`.
pub fn copy_fixture(src: &Path, skip: &str, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != skip {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
        }
    }
    let path = tmp.path().join("config.json");
    if path.is_file() {
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut config);
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    }
    tmp
}

/// The object of a config holding the language model's fields: `text_config` where there is
/// one (multimodal checkpoints), else the config itself.
pub fn text_config(config: &mut Value) -> &mut Value {
    if config.get("text_config").is_some_and(Value::is_object) {
        &mut config["text_config"]
    } else {
        config
    }
}

/// `[vocab]` f32 values of `[1, vocab]` logits.
pub fn values(logits: &Tensor) -> Vec<f32> {
    logits
        .squeeze(0)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// `|got - want| <= 1e-4 + 1e-4 |want|` for every logit: the fixtures' f32 tolerance.
pub fn assert_logits_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: vocabulary size");
    let mut worst = (0.0f64, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs();
        let tol = 1e-4 + 1e-4 * w.abs();
        assert!(
            err <= tol,
            "{what}: logit {i}: got {g}, reference {w} (|diff| {err:e} > {tol:e})"
        );
        if err > worst.0 {
            worst = (err, i);
        }
    }
    eprintln!("{what}: max |diff| {:e} at {}", worst.0, worst.1);
}

/// A forward pass's output as bits (f32, or bf16 widened), for bit-for-bit comparisons.
pub fn logit_bits(t: &Tensor) -> Vec<u32> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::F32 => t
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect(),
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .map(|x| u32::from(x.to_bits()))
            .collect(),
        other => panic!("unexpected dtype {other:?}"),
    }
}
