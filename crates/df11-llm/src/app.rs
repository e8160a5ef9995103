//! The whole command-line program, written once for every architecture: resolve the model, check
//! it, load tokenizer, template and weights, build the prompt, generate, report.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Device};
use df11_candle::config::is_legacy_pickle_repo;
use df11_candle::{Df11Error, ModelWeights, WeightFormat};
use tokenizers::Tokenizer;

use crate::args::CommonArgs;
use crate::chat::{ChatTemplate, Message};
use crate::config::{GenerationDefaults, ModelConfig};
use crate::device::{select_device, select_dtype};
use crate::error::{LlmError, Result};
use crate::generate::{generate, Generation, GenerationParams};
use crate::model::{DecodeOptions, DecoderModel};
use crate::progress::LoadBar;
use crate::report::report;
use crate::sampling::SamplingParams;
use crate::source::ModelSource;
use crate::spec::ModelSpec;
use crate::tokenizer::{encode, load_tokenizer};

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

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Where the model is.
    pub source: ModelSource,
    /// Read a plain BF16 folder instead of a DF11 one.
    pub bf16: bool,
    /// The device.
    pub device: Device,
    /// The compute dtype.
    pub dtype: DType,
    /// Draw progress bars.
    pub show_progress: bool,
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
    config.check_model_type(A::MODEL_TYPES, A::NAME)?;
    match (opts.bf16, config.is_df11()) {
        (false, false) => return Err(LlmError::NotDf11 { path: dir }),
        (true, true) => return Err(LlmError::UnexpectedDf11 { path: dir }),
        _ => {}
    }
    let tokenizer = load_tokenizer(&dir)?;
    let chat_template = ChatTemplate::from_dir(&dir)?;
    let mut defaults = GenerationDefaults::read(&dir, &config)?;
    for token in A::STOP_TOKENS {
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
    let weights = ModelWeights::open(&dir, format, &opts.device, opts.dtype)?;
    let bar = LoadBar::new(0, opts.show_progress);
    let mut model = A::load(&config, &weights, &bar)?;
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

/// The prompt's token ids: the chat template applied to one user message (encoded without
/// special tokens, as `apply_chat_template` does), or the raw prompt encoded with them.
/// Falls back to the raw prompt when the model has no template.
pub fn prompt_ids(
    loaded: &Loaded,
    prompt: &str,
    use_template: bool,
    thinking: bool,
) -> Result<Vec<u32>> {
    match (&loaded.chat_template, use_template) {
        (Some(t), true) => {
            let text = t.render(&[Message::user(prompt)], true, Some(thinking))?;
            encode(&loaded.tokenizer, &text, false)
        }
        _ => encode(&loaded.tokenizer, prompt, true),
    }
}

/// Sampling from the flags, falling back to generation_config.json where a flag is absent.
pub fn sampling_params(args: &CommonArgs, defaults: &GenerationDefaults) -> SamplingParams {
    let temperature = args.temperature.unwrap_or(if defaults.do_sample {
        defaults.temperature.unwrap_or(1.0)
    } else {
        0.0
    });
    SamplingParams {
        temperature,
        top_p: args.top_p.or(defaults.top_p),
        top_k: args.top_k.or(defaults.top_k),
        seed: args.seed,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
    }
}

/// Runs the program for architecture `A`: streamed text on stdout and a report on stderr, or
/// one JSON object on stdout with `--json`.
pub fn run<A: Architecture>(args: &CommonArgs) -> Result<Generation> {
    if let Some(path) = args.matmul {
        df11_candle::set_matmul_path(path);
    }
    if let Some(form) = args.exponents {
        df11_candle::set_exponent_form(form);
    }
    let device = select_device(args.cpu)?;
    let dtype = select_dtype(args.dtype, &device);
    let opts = LoadOptions {
        source: args.source(A::DEFAULT_REPO),
        bf16: args.bf16,
        device,
        dtype,
        show_progress: !args.json,
        decode: args.decode_options(),
    };
    let started = Instant::now();
    let mut loaded = load::<A>(&opts)?;
    let format = if args.bf16 { "BF16" } else { "DF11" };
    eprintln!(
        "{} ({format}) from {} on {:?} in {dtype:?}, loaded in {:.2} s",
        A::NAME,
        loaded.dir.display(),
        opts.device,
        started.elapsed().as_secs_f64()
    );
    if !args.no_chat_template && loaded.chat_template.is_none() {
        eprintln!("the model has no chat template: encoding the prompt as is");
    }
    let prompt = prompt_ids(&loaded, &args.prompt, !args.no_chat_template, args.thinking)?;
    let params = GenerationParams {
        max_new_tokens: args.max_new_tokens,
        eos_token_ids: loaded.defaults.eos_token_ids.clone(),
        sampling: sampling_params(args, &loaded.defaults),
    };
    let stream = !args.json;
    let mut stdout = std::io::stdout();
    let mut on_text = |piece: &str| -> Result<()> {
        if stream {
            let io = |source| LlmError::io("<stdout>", source);
            stdout.write_all(piece.as_bytes()).map_err(io)?;
            stdout.flush().map_err(io)?;
        }
        Ok(())
    };
    let generation = generate(
        &mut loaded.model,
        &loaded.tokenizer,
        &prompt,
        &params,
        &mut on_text,
    )?;
    if args.json {
        let json =
            serde_json::to_string(&generation).map_err(|e| LlmError::Usage(e.to_string()))?;
        println!("{json}");
    } else {
        println!();
        eprintln!("{}", report(&generation));
    }
    Ok(generation)
}
