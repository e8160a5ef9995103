//! Loading a model, written once for every architecture: resolve the model, check it, load
//! tokenizer, template and weights. The command-line program on top is [`crate::cli`].

use std::path::PathBuf;

use candle_core::{DType, Device};
use df11_candle::config::is_legacy_pickle_repo;
use df11_candle::{Df11Error, ModelWeights, WeightFormat};
use tokenizers::Tokenizer;

use crate::chat::ChatTemplate;
use crate::config::{GenerationDefaults, ModelConfig};
use crate::error::{LlmError, Result};
use crate::model::{DecodeOptions, DecoderModel};
use crate::placement::{DeviceMap, Offload};
use crate::progress::LoadBar;
use crate::source::ModelSource;
use crate::spec::ModelSpec;
use crate::tokenizer::load_tokenizer;

/// An architecture: how to recognise its config and map it to the one decoder's options.
pub trait Architecture {
    /// Display name, e.g. `Qwen3`.
    const NAME: &'static str;
    /// The `model_type` values of its config.json.
    const MODEL_TYPES: &'static [&'static str];
    /// The Hub repo used when none is given.
    const DEFAULT_REPO: &'static str;
    /// Special tokens that also end generation (e.g. Gemma's `<end_of_turn>`), added to the
    /// EOS ids of generation_config.json / config.json when the tokenizer has them.
    const STOP_TOKENS: &'static [&'static str] = &[];

    /// The model's [`ModelSpec`] from its config (and, where the checkpoint layout varies, the
    /// names in `weights`). Checks what the architecture does not support.
    fn spec(config: &ModelConfig, weights: &ModelWeights) -> Result<ModelSpec>;

    /// Builds the model; `progress` counts layers.
    fn load(
        config: &ModelConfig,
        weights: &ModelWeights,
        progress: &LoadBar,
    ) -> Result<DecoderModel> {
        DecoderModel::load(Self::spec(config, weights)?, weights, progress)
    }
}

/// An architecture as a value, to choose among several at run time by `config.json` (the `df11`
/// binary runs every architecture this way).
#[derive(Debug, Clone, Copy)]
pub struct ArchInfo {
    /// `Architecture::NAME`.
    pub name: &'static str,
    /// `Architecture::MODEL_TYPES`.
    pub model_types: &'static [&'static str],
    /// `Architecture::DEFAULT_REPO`.
    pub default_repo: &'static str,
    /// `Architecture::STOP_TOKENS`.
    pub stop_tokens: &'static [&'static str],
    /// `Architecture::spec`.
    pub spec: fn(&ModelConfig, &ModelWeights) -> Result<ModelSpec>,
}

impl ArchInfo {
    /// Architecture `A` as a value.
    pub fn of<A: Architecture>() -> Self {
        Self {
            name: A::NAME,
            model_types: A::MODEL_TYPES,
            default_repo: A::DEFAULT_REPO,
            stop_tokens: A::STOP_TOKENS,
            spec: A::spec,
        }
    }
}

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Where the model is.
    pub source: ModelSource,
    /// Read a plain BF16 folder instead of a DF11 one.
    pub bf16: bool,
    /// The device (with `split`: the first of its devices, where the embedding runs).
    pub device: Device,
    /// The layers split over several devices, or `None`: everything on `device`.
    pub split: Option<DeviceMap>,
    /// Layers whose compressed units stay in host memory, staged onto the device around use.
    pub offload: Offload,
    /// The compute dtype.
    pub dtype: DType,
    /// Draw progress bars.
    pub show_progress: bool,
    /// How weights are laid out and multiplied on the GPU (matmul path, exponent form, tiling,
    /// PDL, ...). A DF11 model and its BF16 original give the same bits under the same options.
    pub weights: df11_candle::Df11Options,
    /// How decode steps run (maximum context, CUDA graphs).
    pub decode: DecodeOptions,
}

/// A loaded model with everything needed to prompt it.
pub struct Loaded {
    /// The model folder.
    pub dir: PathBuf,
    /// Its config.json.
    pub config: ModelConfig,
    /// The model.
    pub model: DecoderModel,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template, if the model has one.
    pub chat_template: Option<ChatTemplate>,
    /// EOS ids and sampling defaults.
    pub defaults: GenerationDefaults,
}

/// Resolves, checks and loads a model of architecture `A`. Cheap checks (folder, config,
/// architecture, format, tokenizer) come before any weight is read.
pub fn load<A: Architecture>(opts: &LoadOptions) -> Result<Loaded> {
    load_arch(&ArchInfo::of::<A>(), opts)
}

/// Resolves a model and loads it with whichever of `archs` its `config.json` names
/// (`model_type`); a model of none of them is a typed error listing what is supported.
pub fn load_any(archs: &[ArchInfo], opts: &LoadOptions) -> Result<(ArchInfo, Loaded)> {
    let dir = opts.source.resolve(opts.show_progress)?;
    if !dir.is_dir() {
        return Err(LlmError::FolderNotFound { path: dir });
    }
    let local = LoadOptions {
        source: crate::source::ModelSource::Local(dir.clone()),
        ..opts.clone()
    };
    let model_type = ModelConfig::open(&dir)
        .ok()
        .and_then(|c| c.json().get("model_type")?.as_str().map(str::to_string));
    let arch = archs.iter().find(|a| {
        model_type
            .as_deref()
            .is_some_and(|t| a.model_types.contains(&t))
    });
    match arch {
        Some(arch) => Ok((*arch, load_arch(arch, &local)?)),
        // Let the first architecture's checks report what the folder is (legacy repo, missing
        // config, another architecture).
        None => {
            let supported: Vec<&str> = archs.iter().map(|a| a.name).collect();
            match load_arch(&archs[0], &local) {
                Err(LlmError::WrongArchitecture { path, found, .. }) => {
                    Err(LlmError::WrongArchitecture {
                        path,
                        expected: supported.join(", "),
                        found,
                    })
                }
                Err(e) => Err(e),
                Ok(_) => unreachable!("a config of no listed model_type loaded"),
            }
        }
    }
}

/// [`load`] for an architecture given as a value.
pub fn load_arch(arch: &ArchInfo, opts: &LoadOptions) -> Result<Loaded> {
    let dir = opts.source.resolve(opts.show_progress)?;
    if !dir.is_dir() {
        return Err(LlmError::FolderNotFound { path: dir });
    }
    // A legacy DFloat11 0.1.0 repo (pickled units) is named as such, not reported as a missing
    // config or a model of unknown architecture.
    let legacy = |config: Option<&serde_json::Value>| {
        is_legacy_pickle_repo(&dir, config).then(|| Df11Error::LegacyPickle { path: dir.clone() })
    };
    let config = ModelConfig::open(&dir).map_err(|e| legacy(None).map_or(e, LlmError::from))?;
    if let Some(e) = legacy(Some(config.json())) {
        return Err(e.into());
    }
    config.check_model_type(arch.model_types, arch.name)?;
    match (opts.bf16, config.is_df11()) {
        (false, false) => return Err(LlmError::NotDf11 { path: dir }),
        (true, true) => return Err(LlmError::UnexpectedDf11 { path: dir }),
        _ => {}
    }
    let tokenizer = load_tokenizer(&dir)?;
    let chat_template = ChatTemplate::from_dir(&dir)?;
    let mut defaults = GenerationDefaults::read(&dir, &config)?;
    for token in arch.stop_tokens {
        let id = tokenizer.token_to_id(token);
        if let Some(id) = id.filter(|id| !defaults.eos_token_ids.contains(id)) {
            defaults.eos_token_ids.push(id);
        }
    }
    let format = if opts.bf16 {
        WeightFormat::Dense
    } else {
        WeightFormat::Df11
    };
    if let Some(map) = &opts.split {
        if !map
            .devices
            .first()
            .is_some_and(|d| d.same_device(&opts.device))
        {
            return Err(LlmError::Usage(
                "a split model's first device must be the load options' device".into(),
            ));
        }
    }
    // A model too large for the GPU fails here, naming the sizes, not deep inside an upload.
    let needed = crate::memory::weight_file_bytes(&dir);
    let device_name = crate::placement::device_name(&opts.device);
    let out_of_memory = |e: LlmError| match crate::memory::device_memory(&opts.device) {
        Some((free, total)) if crate::memory::is_out_of_memory(&e) => LlmError::OutOfMemory {
            path: dir.clone(),
            device: device_name.clone(),
            needed,
            free,
            total,
        },
        _ => e,
    };
    let single = opts.split.is_none() && opts.offload == Offload::None;
    if let (true, Some((free, total))) = (single, crate::memory::device_memory(&opts.device)) {
        crate::memory::check_fits(&dir, &device_name, needed, free, total)?;
    }
    let weights = ModelWeights::open_with(&dir, format, &opts.device, opts.dtype, opts.weights)
        .map_err(|e| out_of_memory(e.into()))?;
    let spec = (arch.spec)(&config, &weights)?;
    // A split or offload is planned from each device's free memory and checked before any
    // weight is put on a device.
    let placement = DecoderModel::plan_with(
        &spec,
        &weights,
        opts.split.as_ref(),
        opts.offload,
        &opts.decode,
    )?;
    let bar = LoadBar::new(0, opts.show_progress);
    let mut model =
        DecoderModel::load_placed(spec, &weights, placement, &bar).map_err(out_of_memory)?;
    bar.finish();
    model.set_options(opts.decode.clone())?;
    Ok(Loaded {
        dir,
        config,
        model,
        tokenizer,
        chat_template,
        defaults,
    })
}
