//! The crate's error type: one variant per thing a user can get wrong, each naming the file or
//! folder involved.

use std::path::PathBuf;

/// Result alias used across the crate (and by the model crates).
pub type Result<T> = std::result::Result<T, LlmError>;

/// Errors returned by df11-llm and the model crates built on it. Variant fields are the file,
/// folder or values the message names.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The model folder does not exist or is not a directory.
    #[error("{path}: model folder not found")]
    FolderNotFound { path: PathBuf },
    /// A file the model needs is missing from its folder.
    #[error("{dir}: missing `{file}`")]
    MissingFile { dir: PathBuf, file: String },
    /// The model is of another architecture than the binary runs.
    #[error("{path}: this is a {found} model; this program runs {expected}")]
    WrongArchitecture {
        path: PathBuf,
        expected: String,
        found: String,
    },
    /// A DF11 model was asked for, but the folder holds a plain (BF16) model.
    #[error("{path}: not a DFloat11 model (config.json has no `dfloat11_config`); pass --bf16 to run a plain BF16 model")]
    NotDf11 { path: PathBuf },
    /// A plain BF16 model was asked for (`--bf16`), but the folder holds a DF11 model.
    #[error("{path}: this is a DFloat11 model; drop --bf16 to run it")]
    UnexpectedDf11 { path: PathBuf },
    /// A config field is missing or malformed.
    #[error("{path}: invalid config: {reason}")]
    InvalidConfig { path: PathBuf, reason: String },
    /// The model is not in the local Hugging Face cache (offline mode, or the Hub unreachable).
    #[error("model `{repo}` (revision {revision}) is not in the Hugging Face cache at {cache}: {reason}")]
    NotInCache {
        repo: String,
        revision: String,
        cache: PathBuf,
        reason: String,
    },
    /// The Hugging Face Hub client failed.
    #[error("Hugging Face Hub: {0}")]
    Hub(#[from] hf_hub::HFError),
    /// The tokenizer failed to load or to encode/decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template failed to parse or render.
    #[error("chat template: {0}")]
    Template(String),
    /// A user option is invalid.
    #[error("{0}")]
    Usage(String),
    /// An error from the DF11 weight loader, or reading a file (`Df11Error::Io`, `Json`).
    #[error(transparent)]
    Df11(#[from] df11_candle::Df11Error),
    /// An error from candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// The user pressed Ctrl-C during a generation ([`crate::interrupt`]).
    #[error("interrupted (Ctrl-C)")]
    Interrupted,
    /// A CUDA device index the machine does not have (`--devices`).
    #[error("CUDA device {index} does not exist: this machine has {count} CUDA device(s){}", if *.count > 0 { format!(" (0..={})", .count - 1) } else { String::new() })]
    NoSuchDevice { index: usize, count: usize },
    /// The model does not fit in the GPU's memory ([`crate::memory::check_fits`]).
    #[error("{path}: out of GPU memory: loading needs at least {} (the weights), {device} has {} free of {}", gib(*.needed), gib(*.free), gib(*.total))]
    OutOfMemory {
        path: PathBuf,
        device: String,
        needed: u64,
        free: u64,
        total: u64,
    },
}

/// A config value as a message shows it: plain, or in exponent form when very large or small
/// (`1e308`, not 309 digits).
pub(crate) fn shown(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-6..1e16).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// `bytes` as GiB with two decimals.
fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl LlmError {
    /// An [`LlmError::InvalidConfig`].
    pub fn config(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::InvalidConfig {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// Reading or writing `path` failed.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Df11(df11_candle::Df11Error::Io {
            path: path.into(),
            source,
        })
    }

    /// The JSON file `path` does not parse.
    pub fn json(path: impl Into<PathBuf>, source: serde_json::Error) -> Self {
        Self::Df11(df11_candle::Df11Error::Json {
            path: path.into(),
            source,
        })
    }
}

impl From<tokenizers::Error> for LlmError {
    fn from(e: tokenizers::Error) -> Self {
        Self::Tokenizer(e.to_string())
    }
}

impl From<minijinja::Error> for LlmError {
    fn from(e: minijinja::Error) -> Self {
        Self::Template(template_error_text(&e))
    }
}

/// A template error's text: the message with the template's name and line, then its causes.
/// Not minijinja's alternate form, which adds an excerpt of the source: minijinja 2.24 panics
/// drawing some excerpts (a span that ends before it starts: `"^".repeat(end - start)`; found
/// by the `chat_template` fuzz target).
fn template_error_text(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}
