//! Streaming decode with a real (fixture) byte-level BPE tokenizer: the pieces, concatenated,
//! equal the one-shot decode, and multi-byte characters split over tokens come out whole.

use std::path::PathBuf;

use df11_llm::{encode, load_tokenizer, LlmError, TextStream};

fn fixture_dir() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let dir = PathBuf::from(manifest).join("../../tests/fixtures/models/qwen3-tiny/df11");
    assert!(dir.is_dir(), "fixtures not found at {}", dir.display());
    dir
}

#[test]
fn stream_pieces_concatenate_to_the_full_decode() {
    let tokenizer = load_tokenizer(&fixture_dir()).unwrap();
    let text = "A héllo wörld ✓ — binary trees, 木 and 🌳!";
    let ids = encode(&tokenizer, text, false).unwrap();
    assert!(ids.len() > text.chars().count() / 2);
    let mut stream = TextStream::new(&tokenizer);
    let mut pieces = Vec::new();
    for id in &ids {
        if let Some(p) = stream.push(*id).unwrap() {
            assert!(!p.contains('\u{FFFD}'), "a split character leaked: {p:?}");
            pieces.push(p);
        }
    }
    if let Some(p) = stream.finish().unwrap() {
        pieces.push(p);
    }
    let full = tokenizer.decode(&ids, true).unwrap();
    assert_eq!(pieces.concat(), full);
    assert_eq!(stream.text().unwrap(), full);
    assert!(full.contains("🌳"));
    assert!(pieces.len() > 5, "streamed in pieces: {pieces:?}");
}

#[test]
fn missing_tokenizer_is_typed() {
    let tmp = tempfile::tempdir().unwrap();
    match load_tokenizer(tmp.path()) {
        Err(LlmError::MissingFile { file, .. }) => assert_eq!(file, "tokenizer.json"),
        other => panic!("expected MissingFile, got {:?}", other.map(|_| ())),
    }
}
