//! What the fuzz targets share: the byte format of a raw unit (the six tensors of a DF11 unit
//! in one input), an independent reference decoder, and the modules fuzzed from df11-llm and
//! df11-server, compiled here from their own source files.

use df11_candle::UnitTensors;

/// df11-llm's `chat.rs`, as is. Depending on df11-llm would bring candle-transformers,
/// tokenizers and hf-hub (with a TLS stack) into the fuzz build: two thirds of its time, which
/// CI pays on every run. The file reads `crate::config::read_json` and `crate::error`, given by
/// the two small modules below with the same signatures.
#[path = "../../crates/df11-llm/src/chat.rs"]
pub mod chat;

/// df11-server's `api.rs` (request bodies and their checks), as is: it needs only serde.
#[path = "../../crates/df11-server/src/api.rs"]
pub mod api;

/// What `chat.rs` takes from df11-llm's `config` module.
mod config {
    use std::path::Path;

    use serde_json::Value;

    use crate::error::{LlmError, Result};

    /// Reads and parses a JSON file.
    pub fn read_json(path: &Path) -> Result<Value> {
        let text = std::fs::read_to_string(path).map_err(|e| LlmError::io(path, e))?;
        serde_json::from_str(&text).map_err(|e| LlmError::Template(e.to_string()))
    }
}

/// What `chat.rs` takes from df11-llm's `error` module.
mod error {
    use std::path::Path;

    /// The subset of df11-llm's `LlmError` that `chat.rs` produces.
    #[derive(Debug)]
    pub enum LlmError {
        /// A template error (as df11-llm formats it).
        Template(String),
        /// A file that could not be read.
        Io(String),
    }

    impl LlmError {
        pub fn io(path: &Path, e: std::io::Error) -> Self {
            Self::Io(format!("{}: {e}", path.display()))
        }
    }

    impl From<minijinja::Error> for LlmError {
        fn from(e: minijinja::Error) -> Self {
            // As df11-llm's `template_error_text`.
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
            Self::Template(text)
        }
    }

    impl std::fmt::Display for LlmError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Self::Template(m) | Self::Io(m) => f.write_str(m),
            }
        }
    }

    pub type Result<T> = std::result::Result<T, LlmError>;
}

/// Names of a unit's six tensors, in the order a raw unit input holds them.
pub const FIELDS: [&str; 6] = [
    "encoded_exponent",
    "sign_mantissa",
    "luts",
    "gaps",
    "output_positions",
    "split_positions",
];

/// A unit's six tensors, owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawUnit {
    /// The six tensors' bytes, in [`FIELDS`] order.
    pub fields: [Vec<u8>; 6],
}

impl RawUnit {
    /// Reads a raw unit input: six little-endian `u32` lengths, then the six fields one after
    /// the other. A field that runs past the input is cut short; a missing header reads as 0s.
    /// Any bytes make a unit, so mutations of a valid unit stay units.
    pub fn parse(data: &[u8]) -> Self {
        let mut lens = [0usize; 6];
        for (i, len) in lens.iter_mut().enumerate() {
            let mut b = [0u8; 4];
            for (k, byte) in b.iter_mut().enumerate() {
                *byte = data.get(4 * i + k).copied().unwrap_or(0);
            }
            *len = u32::from_le_bytes(b) as usize;
        }
        let mut rest = data.get(24..).unwrap_or(&[]);
        let fields = lens.map(|len| {
            let (field, tail) = rest.split_at(len.min(rest.len()));
            rest = tail;
            field.to_vec()
        });
        Self { fields }
    }

    /// The input that [`RawUnit::parse`] reads back as this unit.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in &self.fields {
            out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        }
        for f in &self.fields {
            out.extend_from_slice(f);
        }
        out
    }

    /// The unit as the decoders borrow it.
    pub fn tensors(&self) -> UnitTensors<'_> {
        let [e, s, l, g, o, p] = &self.fields;
        UnitTensors {
            encoded_exponent: e,
            sign_mantissa: s,
            luts: l,
            gaps: g,
            output_positions: o,
            split_positions: p,
        }
    }

    /// An owned copy of borrowed unit tensors.
    pub fn of(t: &UnitTensors<'_>) -> Self {
        Self {
            fields: [
                t.encoded_exponent.to_vec(),
                t.sign_mantissa.to_vec(),
                t.luts.to_vec(),
                t.gaps.to_vec(),
                t.output_positions.to_vec(),
                t.split_positions.to_vec(),
            ],
        }
    }
}

/// The exponents a unit's stream codes, walked bit by bit through the LUTs as the format
/// document describes (32 bits looked at per code, MSB first, zeros past the end of the
/// stream; a byte >= 240 points at LUT row `256 - byte`, anything else is the symbol, whose
/// length is in the last row). Written apart from the crate's table-driven decoders, as an
/// oracle for them. Returns the exponents and the bit where the last code ends, or `None`
/// when a code does not resolve within four LUT levels or its length is 0.
pub fn reference_exponents(stream: &[u8], luts: &[u8], n: usize) -> Option<(Vec<u8>, u64)> {
    let rows = luts.len() / 256;
    if rows < 2 || !luts.len().is_multiple_of(256) {
        return None;
    }
    let lengths = &luts[(rows - 1) * 256..];
    let bit_at = |bit: u64| -> u32 {
        let byte = stream.get((bit / 8) as usize).copied().unwrap_or(0);
        ((byte >> (7 - bit % 8)) & 1) as u32
    };
    let mut out = Vec::with_capacity(n);
    let mut pos = 0u64;
    for _ in 0..n {
        let mut word = 0u32;
        for k in 0..32 {
            word = (word << 1) | bit_at(pos + k);
        }
        let mut row = 0usize;
        let mut symbol = None;
        for level in 0..4 {
            let idx = ((word >> (24 - 8 * level)) & 0xFF) as usize;
            let v = *luts.get(row * 256 + idx)?;
            if v < 240 {
                symbol = Some(v);
                break;
            }
            row = 256 - v as usize;
            if row >= rows - 1 {
                return None;
            }
        }
        let s = symbol?;
        let len = lengths[s as usize] as u64;
        if len == 0 || len > 32 {
            return None;
        }
        out.push(s);
        pos += len;
    }
    Some((out, pos))
}
