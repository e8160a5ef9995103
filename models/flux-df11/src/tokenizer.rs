//! The pipeline's two tokenizers: CLIP's from `tokenizer/` and T5's from `tokenizer_2/`, padded
//! and truncated as `FluxPipeline` calls them (`padding="max_length"`, `truncation=True`).
//!
//! The FLUX.1 base repos ship CLIP's tokenizer as `vocab.json` + `merges.txt` only (no
//! `tokenizer.json`); it is then built the way transformers' `CLIPConverter` builds the fast
//! tokenizer: NFC, runs of whitespace collapsed to one space, lowercase; split on CLIP's
//! regex, then byte-level without a prefix space; BPE with the end-of-word suffix `</w>`;
//! `<|startoftext|>` ... `<|endoftext|>` around the ids.

use std::collections::HashMap;
use std::path::Path;

use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::normalizers::{Lowercase, Replace, Sequence as Normalizers, NFC};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizers;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::roberta::RobertaProcessing;
use tokenizers::{
    AddedToken, PaddingParams, PaddingStrategy, SplitDelimiterBehavior, Tokenizer, TruncationParams,
};

use crate::error::{FluxError, Result};

/// CLIP's pre-tokenizer pattern (the special tokens, contractions, letter runs, single digits,
/// runs of other non-space characters), as in CLIP's `tokenizer.json`.
const CLIP_PATTERN: &str =
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+";

/// The most merges CLIP's tokenizer reads from `merges.txt` (transformers' `CLIPTokenizer`
/// keeps lines 1 to 49152 - 256 - 2 of the file).
const CLIP_MAX_MERGES: usize = 49152 - 256 - 2;

/// A refusal of the tokenizer file `path`.
fn refuse(path: &Path, reason: impl Into<String>) -> FluxError {
    FluxError::config(path, reason)
}

/// CLIP's tokenizer from the folder `dir`: its `tokenizer.json` where present, else built from
/// `vocab.json` + `merges.txt` ([`clip_from_vocab`]). Not padded.
pub fn clip_tokenizer(dir: &Path) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    if path.is_file() {
        return Tokenizer::from_file(&path).map_err(|e| refuse(&path, e.to_string()));
    }
    clip_from_vocab(dir)
}

/// CLIP's tokenizer built from `vocab.json` and `merges.txt` of `dir` as transformers'
/// `CLIPConverter` builds it; the bos, eos and unknown tokens from `tokenizer_config.json` /
/// `special_tokens_map.json` (default `<|startoftext|>`, `<|endoftext|>`, `<|endoftext|>`).
pub fn clip_from_vocab(dir: &Path) -> Result<Tokenizer> {
    let vocab_path = dir.join("vocab.json");
    let merges_path = dir.join("merges.txt");
    let text =
        std::fs::read_to_string(&vocab_path).map_err(|e| refuse(&vocab_path, e.to_string()))?;
    let vocab: HashMap<String, u32> =
        serde_json::from_str(&text).map_err(|e| refuse(&vocab_path, e.to_string()))?;
    let merges = read_merges(&merges_path)?;
    for (a, b) in &merges {
        for part in [a.clone(), b.clone(), format!("{a}{b}")] {
            if !vocab.contains_key(&part) {
                return Err(refuse(
                    &merges_path,
                    format!("merge `{a} {b}`: `{part}` is not in vocab.json"),
                ));
            }
        }
    }
    let bos = special_token(dir, "bos_token", "<|startoftext|>");
    let eos = special_token(dir, "eos_token", "<|endoftext|>");
    let unk = special_token(dir, "unk_token", "<|endoftext|>");
    let id = |token: &str| {
        vocab
            .get(token)
            .copied()
            .ok_or_else(|| refuse(&vocab_path, format!("no `{token}` in the vocabulary")))
    };
    let (bos_id, eos_id) = (id(&bos)?, id(&eos)?);
    id(&unk)?;
    let vocab: Vocab = vocab.into_iter().collect();
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .unk_token(unk)
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix("</w>".into())
        .fuse_unk(false)
        .build()
        .map_err(|e| refuse(&merges_path, e.to_string()))?;
    let mut tokenizer = Tokenizer::new(model);
    let bad_regex = |e: tokenizers::Error| refuse(&vocab_path, e.to_string());
    let normalizer = Normalizers::new(vec![
        NFC.into(),
        Replace::new(
            tokenizers::normalizers::replace::ReplacePattern::Regex(r"\s+".into()),
            " ",
        )
        .map_err(bad_regex)?
        .into(),
        Lowercase.into(),
    ]);
    tokenizer
        .with_normalizer(Some(normalizer))
        .map_err(bad_regex)?;
    let split = Split::new(
        SplitPattern::Regex(CLIP_PATTERN.into()),
        SplitDelimiterBehavior::Removed,
        true,
    )
    .map_err(bad_regex)?;
    tokenizer.with_pre_tokenizer(Some(PreTokenizers::new(vec![
        split.into(),
        ByteLevel::new(false, true, false).into(),
    ])));
    tokenizer.with_post_processor(Some(
        RobertaProcessing::new((eos.clone(), eos_id), (bos.clone(), bos_id))
            .trim_offsets(false)
            .add_prefix_space(false),
    ));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    tokenizer
        .add_special_tokens([AddedToken::from(bos, true), AddedToken::from(eos, true)])
        .map_err(|e| refuse(&vocab_path, e.to_string()))?;
    Ok(tokenizer)
}

/// The merges of `merges.txt` (after the `#version` line), at most [`CLIP_MAX_MERGES`].
fn read_merges(path: &Path) -> Result<Merges> {
    let text = std::fs::read_to_string(path).map_err(|e| refuse(path, e.to_string()))?;
    let mut lines = text.lines().peekable();
    if lines.peek().is_some_and(|l| l.starts_with("#version")) {
        lines.next();
    }
    lines
        .filter(|l| !l.trim().is_empty())
        .take(CLIP_MAX_MERGES)
        .enumerate()
        .map(|(i, line)| {
            let mut parts = line.split(' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(a), Some(b), None) if !a.is_empty() && !b.is_empty() => {
                    Ok((a.to_string(), b.to_string()))
                }
                _ => Err(refuse(
                    path,
                    format!("merge {}: `{line}` is not two tokens", i + 1),
                )),
            }
        })
        .collect()
}

/// T5's tokenizer from `dir/tokenizer.json`. Not padded.
pub fn t5_tokenizer(dir: &Path) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    Tokenizer::from_file(&path).map_err(|e| refuse(&path, e.to_string()))
}

/// `tokenizer`, from the folder `dir`, padded and truncated to `length` tokens with `pad` (a
/// token of its vocabulary), as the pipeline calls it.
pub fn padded(mut tokenizer: Tokenizer, dir: &Path, length: usize, pad: &str) -> Result<Tokenizer> {
    let pad_id = tokenizer
        .token_to_id(pad)
        .ok_or_else(|| refuse(dir, format!("no padding token `{pad}` in the vocabulary")))?;
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: length,
            ..Default::default()
        }))
        .map_err(|e| refuse(dir, e.to_string()))?;
    tokenizer.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::Fixed(length),
        pad_id,
        pad_token: pad.to_string(),
        ..Default::default()
    }));
    Ok(tokenizer)
}

/// The special token `key` (`pad_token`, `bos_token`, ...) of a tokenizer folder:
/// `tokenizer_config.json`'s, else `special_tokens_map.json`'s (a string or an object with
/// `content`), else `default`.
pub fn special_token(dir: &Path, key: &str, default: &str) -> String {
    ["tokenizer_config.json", "special_tokens_map.json"]
        .iter()
        .find_map(|file| token_in(&dir.join(file), key))
        .unwrap_or_else(|| default.to_string())
}

fn token_in(path: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    match value.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}
