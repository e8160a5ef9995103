//! Shared machinery for DF11 language models on candle.
//!
//! Every architecture runs through one decoder, [`DecoderModel`]: a model crate (e.g.
//! `qwen3-df11`) implements [`Architecture`] by mapping its `config.json` to a [`ModelSpec`]
//! (fused projections, biases, q/k norms, Gemma's norms, windows, RoPE, scales) and gets the
//! rest for free: model source (local folder or Hugging Face Hub through the HF cache),
//! tokenizer and chat template, the generation loop with sampling, the batching engine, and the
//! report.
//!
//! # Features
//!
//! - `cuda`: the CUDA path (step kernels, CUDA graphs, placement over GPUs).
//! - `cli`: the model programs' command line (`args`, `cli`: the shared flags, the `DF11_*`
//!   variables the binary hands over read into [`df11_candle::Df11Options`] and
//!   [`DecodeOptions`], the run and chat front ends) and the end-to-end bench's measurement
//!   loop (`bench`).
//! - `testing`: the shared model tests (`testing`, `model_tests!`) the model crates run.

#![warn(missing_docs)]

pub mod activation;
pub mod app;
#[cfg(feature = "cli")]
pub mod args;
pub mod attention;
#[cfg(feature = "cli")]
pub mod bench;
pub mod chat;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod decoder;
pub mod device;
pub mod engine;
pub mod error;
pub mod generate;
#[cfg(feature = "cuda")]
pub mod graph;
pub mod interrupt;
pub mod kv_cache;
pub mod memory;
pub mod model;
pub mod norm;
#[cfg(feature = "cuda")]
pub mod ops;
pub mod placement;
pub mod progress;
pub mod report;
pub mod rope;
pub mod sampling;
pub mod serving;
pub mod source;
pub mod spec;
pub mod step;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text_config;
pub mod tie;
pub mod tokenizer;
pub mod transfer;

pub use app::{load, load_any, load_arch, ArchInfo, Architecture, LoadOptions, Loaded};
#[cfg(feature = "cli")]
pub use args::{parse_args, CommonArgs, ComputeDtype, ModelArgs};
pub use attention::{
    attention, causal_mask, decoder_mask, last_position, merge_heads, softcap,
    softcapped_attention, split_heads,
};
pub use chat::{ChatTemplate, Message};
#[cfg(feature = "cli")]
pub use cli::{conversation_ids, prompt_ids, run, run_archs, sampling_params};
pub use config::{GenerationDefaults, ModelConfig, RopeConfig};
pub use decoder::{DecoderLayer, EagerAt, GatedMlp, SelfAttention};
pub use device::{cuda_device_count, cuda_devices, open_cuda, select_device, select_dtype};
pub use engine::{Engine, SeqId};
pub use error::{LlmError, Result};
pub use generate::{generate, CausalLm, Generation, GenerationParams};
pub use interrupt::exit_now;
pub use kv_cache::KvCache;
pub use memory::PeakMemory;
pub use model::{DecodeOptions, DecoderModel, PromptAttention, DEFAULT_MAX_CONTEXT};
pub use norm::RmsNorm;
pub use placement::{parse_size, DeviceMap, LayerSplit, ModelSizes, Offload, Placement, Segment};
pub use progress::LoadBar;
pub use rope::{apply_rope, default_inv_freq, RopeScaling, RotaryEmbedding};
pub use sampling::{greedy_tokens, Sampler, SamplingParams};
pub use source::ModelSource;
pub use spec::{Activation, DecoderSpec, LayerSpec, ModelSpec, NormKind, RopeSpec, WeightNames};
pub use step::StepRows;
pub use text_config::{TextConfig, TextDefaults, TextOptions};
pub use tie::output_projection;
pub use tokenizer::{encode, load_tokenizer, TextStream};
