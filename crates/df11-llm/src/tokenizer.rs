//! The model's `tokenizer.json`, and a streaming decoder that turns generated ids into text as
//! they come (only whole characters are emitted).

use std::path::Path;

use tokenizers::Tokenizer;

use crate::error::{LlmError, Result};

/// Loads `dir/tokenizer.json`.
pub fn load_tokenizer(dir: &Path) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Err(LlmError::MissingFile {
            dir: dir.to_path_buf(),
            file: "tokenizer.json".into(),
        });
    }
    Tokenizer::from_file(&path).map_err(|e| LlmError::Tokenizer(format!("{}: {e}", path.display())))
}

/// Encodes `text`; `add_special_tokens` as in `tokenizer.encode(text, add_special_tokens=…)`.
pub fn encode(tokenizer: &Tokenizer, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
    Ok(tokenizer
        .encode(text, add_special_tokens)?
        .get_ids()
        .to_vec())
}

/// Decodes generated ids incrementally, skipping special tokens.
///
/// Keeps every id and re-decodes the tail since the last emitted text, so multi-byte characters
/// split over several tokens come out whole, and the concatenated pieces equal the full decode.
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    /// Ids before this index have been emitted.
    prefix_index: usize,
    /// Start of the window decoded for context (a few ids before `prefix_index`).
    read_index: usize,
}

impl<'a> TextStream<'a> {
    /// A stream over `tokenizer`.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        Self {
            tokenizer,
            ids: Vec::new(),
            prefix_index: 0,
            read_index: 0,
        }
    }

    fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(self.tokenizer.decode(ids, true)?)
    }

    /// Adds one id; returns the new text, if a whole piece is ready.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let before = self.decode(&self.ids[self.read_index..self.prefix_index])?;
        let now = self.decode(&self.ids[self.read_index..])?;
        if now.len() > before.len() && !now.ends_with('\u{FFFD}') && now.starts_with(&before) {
            let piece = now[before.len()..].to_string();
            self.read_index = self.prefix_index;
            self.prefix_index = self.ids.len();
            Ok(Some(piece))
        } else {
            Ok(None)
        }
    }

    /// The text not emitted yet (at the end of generation).
    pub fn finish(&mut self) -> Result<Option<String>> {
        let before = self.decode(&self.ids[self.read_index..self.prefix_index])?;
        let now = self.decode(&self.ids[self.read_index..])?;
        self.read_index = self.prefix_index;
        self.prefix_index = self.ids.len();
        let rest = now.strip_prefix(&before).unwrap_or(&now);
        Ok((!rest.is_empty()).then(|| rest.to_string()))
    }

    /// All text so far, decoded in one go.
    pub fn text(&self) -> Result<String> {
        self.decode(&self.ids)
    }
}
