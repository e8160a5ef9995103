//! CLIP's tokenizer built from `vocab.json` + `merges.txt` (as the FLUX.1 base repos ship it,
//! without `tokenizer.json`) against the fixture's `tokenizer.json` (transformers'
//! `CLIPTokenizerFast`): the same ids for every prompt, raw and as the pipeline pads them.

mod common;

use std::path::{Path, PathBuf};

use flux_df11::text::CLIP_LENGTH;
use flux_df11::tokenizer::{clip_from_vocab, clip_tokenizer, padded};
use flux_df11::FluxError;
use tokenizers::Tokenizer;

fn clip_dir() -> PathBuf {
    common::fixture().join("base/tokenizer")
}

/// Prompts that exercise each stage: merges, case, whitespace, punctuation, digits,
/// contractions, accents (composed and not), other scripts, emoji, special tokens, length.
fn prompts() -> Vec<String> {
    let mut p: Vec<String> = [
        "a tiny red fox",
        "A TINY Red FoX",
        "  a\ttiny \n\n red   fox  ",
        "Hello, world!!! (a fox?) -- [yes]; {no}: 'quoted' \"double\"",
        "1234 foxes, 3.14159 and 2nd place; 10,000 x 20%",
        "they're we've I'd you'll it's she'S DON'T",
        "café naïve résumé cafe\u{301} Å Ω ß",
        "東京の赤い狐 лиса 🦊🔥 — “quotes” …",
        "<|startoftext|>a tiny<|endoftext|> fox",
        "tinytiny redred foxfox",
        "",
        " ",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    p.push(
        "a tiny red fox jumps over the lazy dog, 123 times! "
            .repeat(12)
            .trim()
            .to_string(),
    );
    p
}

fn ids(t: &Tokenizer, text: &str) -> Vec<u32> {
    t.encode(text, true).unwrap().get_ids().to_vec()
}

#[test]
fn vocab_and_merges_give_the_tokenizer_json_ids() {
    let dir = clip_dir();
    assert!(dir.join("tokenizer.json").is_file() && dir.join("merges.txt").is_file());
    let reference = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let built = clip_from_vocab(&dir).unwrap();
    let mut merged = false;
    for prompt in prompts() {
        let want = ids(&reference, &prompt);
        assert_eq!(ids(&built, &prompt), want, "{prompt:?}");
        merged |= want.iter().any(|&i| (512..629).contains(&i));
    }
    // Some prompts use merged tokens (ids after the two byte alphabets), not only bytes.
    assert!(merged);
    let long = prompts().pop().unwrap();
    assert!(ids(&reference, &long).len() > CLIP_LENGTH);
    // As the pipeline pads and truncates them.
    let pad = |t: Tokenizer| padded(t, &dir, CLIP_LENGTH, "<|endoftext|>").unwrap();
    let (reference, built) = (pad(reference), pad(built));
    for prompt in prompts() {
        let want = ids(&reference, &prompt);
        assert_eq!(want.len(), CLIP_LENGTH);
        assert_eq!(ids(&built, &prompt), want, "{prompt:?}");
    }
    let truncated = ids(&built, &long);
    assert_eq!(truncated[0], 629);
    assert_eq!(truncated[CLIP_LENGTH - 1], 630);
}

/// The fixture's tokenizer folder without `tokenizer.json`, as the real repos ship it.
fn vocab_only_copy() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(clip_dir()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "tokenizer.json" {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
        }
    }
    tmp
}

#[test]
fn a_folder_without_tokenizer_json_is_read_from_vocab_and_merges() {
    let tmp = vocab_only_copy();
    let reference = Tokenizer::from_file(clip_dir().join("tokenizer.json")).unwrap();
    let t = clip_tokenizer(tmp.path()).unwrap();
    assert_eq!(
        ids(&t, "A tiny, RED fox!"),
        ids(&reference, "A tiny, RED fox!")
    );
}

fn config_error(e: FluxError) -> (PathBuf, String) {
    match e {
        FluxError::Config { path, reason } => (path, reason),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn broken_vocab_or_merges_are_named() {
    let tmp = vocab_only_copy();
    let dir = tmp.path();
    let file = |name: &str| dir.join(name);
    let merges = std::fs::read_to_string(file("merges.txt")).unwrap();

    std::fs::write(file("merges.txt"), format!("{merges}zz q\n")).unwrap();
    let (path, reason) = config_error(clip_from_vocab(dir).unwrap_err());
    assert_eq!(path, file("merges.txt"));
    assert!(reason.contains("zz q"), "{reason}");

    std::fs::write(file("merges.txt"), format!("{merges}a b c\n")).unwrap();
    let (path, reason) = config_error(clip_from_vocab(dir).unwrap_err());
    assert_eq!(path, file("merges.txt"));
    assert!(reason.contains("not two tokens"), "{reason}");

    std::fs::remove_file(file("merges.txt")).unwrap();
    assert_eq!(
        config_error(clip_tokenizer(dir).unwrap_err()).0,
        file("merges.txt")
    );

    std::fs::write(file("merges.txt"), &merges).unwrap();
    std::fs::write(file("vocab.json"), "{\"a\": 0").unwrap();
    assert_eq!(
        config_error(clip_tokenizer(dir).unwrap_err()).0,
        file("vocab.json")
    );

    // A vocabulary without the end token.
    std::fs::write(file("vocab.json"), "{\"a\": 0, \"<|startoftext|>\": 1}").unwrap();
    std::fs::write(file("merges.txt"), "#version: 0.2\n").unwrap();
    let (path, reason) = config_error(clip_from_vocab(dir).unwrap_err());
    assert_eq!(path, file("vocab.json"));
    assert!(reason.contains("<|endoftext|>"), "{reason}");
    let _: &Path = dir;
}
