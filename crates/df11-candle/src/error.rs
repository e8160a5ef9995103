//! The crate's error type.
//!
//! Every error that comes from input names the file and, where there is one, the tensor or unit,
//! so a user can tell which part of a model folder is damaged.

use std::path::PathBuf;

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, Df11Error>;

/// What is wrong with a compressed unit. One variant per invariant of the DF11 format, so tests
/// (and callers) can tell the defects apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitDefect {
    /// `luts` is not `[K, 256]` with `2 <= K <= 18`.
    LutShape(String),
    /// A decode-row entry points at a row that does not exist.
    LutPointer {
        /// The LUT row holding the entry.
        row: usize,
        /// The entry's index in the row (the byte value looked up).
        index: usize,
        /// The entry: a row number past the last decode row.
        value: u8,
    },
    /// A symbol reachable in the decode rows has a code length of 0 or more than 32 bits.
    LutCodeLength {
        /// The exponent symbol.
        symbol: u8,
        /// Its code length in bits, from the last LUT row.
        length: u8,
    },
    /// `output_positions` has the wrong length, does not start at 0, decreases, or does not end at N.
    OutputPositions(String),
    /// `gaps` is shorter than `320 * n_blocks` bytes.
    GapsLength {
        /// `320 * n_blocks` (5 bits per thread).
        expected_at_least: usize,
        /// Bytes in `gaps`.
        found: usize,
    },
    /// `split_positions` is not strictly increasing inside `(0, N)`, or disagrees with the members.
    SplitPositions(String),
    /// A size does not fit the 32-bit sizes of the GPU kernel, or the stream is empty while N > 0.
    Size(String),
    /// The members' element counts do not add up to N.
    MemberSizes {
        /// N, the unit's element count.
        expected: usize,
        /// The sum of the members' element counts.
        found: usize,
    },
    /// The bitstream does not decode: an invalid code, a code running past the end of the stream,
    /// or a `gaps` / `output_positions` entry that disagrees with where the codes really start.
    Stream(String),
}

impl std::fmt::Display for UnitDefect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LutShape(s) => write!(f, "bad luts shape: {s}"),
            Self::LutPointer { row, index, value } => {
                write!(
                    f,
                    "luts[{row}][{index}] = {value} points at a row that does not exist"
                )
            }
            Self::LutCodeLength { symbol, length } => {
                write!(
                    f,
                    "symbol {symbol} has code length {length} (must be 1..=32)"
                )
            }
            Self::OutputPositions(s) => write!(f, "bad output_positions: {s}"),
            Self::GapsLength {
                expected_at_least,
                found,
            } => {
                write!(
                    f,
                    "gaps has {found} bytes, expected at least {expected_at_least}"
                )
            }
            Self::SplitPositions(s) => write!(f, "bad split_positions: {s}"),
            Self::Size(s) => write!(f, "bad sizes: {s}"),
            Self::MemberSizes { expected, found } => write!(
                f,
                "member matrices hold {found} elements but the unit holds {expected}"
            ),
            Self::Stream(s) => write!(f, "corrupt bitstream: {s}"),
        }
    }
}

/// Errors returned by df11-candle.
#[derive(Debug, thiserror::Error)]
pub enum Df11Error {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file does not parse.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The folder is not a model folder (no config.json, or not a directory).
    #[error("{path}: {reason}")]
    NotAModel {
        /// The folder.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// `config.json` has no `dfloat11_config`: this is a plain model, not a DF11 one.
    #[error("{path}: no `dfloat11_config` in config.json: this is not a DFloat11 model (a plain BF16 folder?)")]
    NotDf11 {
        /// The `config.json`.
        path: PathBuf,
    },
    /// A DFloat11 0.1.0 repo (pickled tensors): unsupported, and unsafe to unpickle.
    #[error("{path}: this is a legacy DFloat11 0.1.0 repo (pickle files); it is not supported. Use a DF11 repo in the safetensors format (dfloat11 >= 0.2.0), or re-compress the BF16 model with `df11 compress`")]
    LegacyPickle {
        /// The folder.
        path: PathBuf,
    },
    /// `dfloat11_config` or another config field is malformed.
    #[error("{path}: invalid config: {reason}")]
    InvalidConfig {
        /// The config file (or the folder).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `dfloat11_config.version` names a release whose format we do not read.
    #[error("{path}: dfloat11_config.version `{version}` is not a format this library reads (supported: {supported})")]
    UnsupportedVersion {
        /// The config file.
        path: PathBuf,
        /// The version found.
        version: String,
        /// The versions read.
        supported: &'static str,
    },
    /// A safetensors file is truncated or its header is malformed.
    #[error("{path}: invalid safetensors file: {reason}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The same tensor name appears in two files.
    #[error("tensor `{tensor}` appears in both {first} and {second}")]
    DuplicateTensor {
        /// The tensor name.
        tensor: String,
        /// The first file holding it.
        first: PathBuf,
        /// The second file holding it.
        second: PathBuf,
    },
    /// A tensor that must exist is absent.
    #[error("{path}: missing tensor `{tensor}`")]
    MissingTensor {
        /// The file (or folder) where it was looked for.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
    },
    /// A tensor has the wrong dtype.
    #[error("{path}: tensor `{tensor}` has dtype {found}, expected {expected}")]
    WrongDtype {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The dtype(s) accepted.
        expected: String,
        /// The dtype found.
        found: String,
    },
    /// A tensor has the wrong shape.
    #[error("{path}: tensor `{tensor}` has shape {found:?}, expected {expected}")]
    WrongShape {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The shape expected, in words (e.g. `[K, 256]`).
        expected: String,
        /// The shape found (a compressed weight's is its flat element count).
        found: Vec<usize>,
    },
    /// A compressed unit matches no `pattern_dict` key.
    #[error("{path}: compressed unit `{unit}` matches no pattern_dict key")]
    UnmatchedUnit {
        /// The file holding the unit.
        path: PathBuf,
        /// The unit's module path.
        unit: String,
    },
    /// A compressed unit matches more than one `pattern_dict` key.
    #[error("{path}: compressed unit `{unit}` matches several pattern_dict keys: {patterns:?}")]
    AmbiguousUnit {
        /// The file holding the unit.
        path: PathBuf,
        /// The unit's module path.
        unit: String,
        /// The keys it matches.
        patterns: Vec<String>,
    },
    /// A compressed unit violates an invariant of the format.
    #[error("{path}: unit `{unit}`: {defect}")]
    InvalidUnit {
        /// The file holding the unit.
        path: PathBuf,
        /// The unit's module path.
        unit: String,
        /// The invariant it violates.
        defect: UnitDefect,
    },
    /// The compressor was given something it cannot encode.
    #[error("{path}: tensor `{tensor}`: {reason}")]
    Unencodable {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// Why it cannot be encoded.
        reason: String,
    },
    /// A caller-provided buffer or argument is wrong (not an input-file problem).
    #[error("{0}")]
    Usage(String),
    /// An error from candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl Df11Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
