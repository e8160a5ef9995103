//! The chat-template renderer (df11-llm's `ChatTemplate`, minijinja with transformers' settings;
//! compiled from `chat.rs` by this crate's lib): a template comes with an untrusted model folder and messages come from anyone
//! who reaches the server. First byte even: the rest is a template (hostile templates) rendered
//! with a fixed conversation. Odd: the rest is a conversation (messages separated by 0x1e, the
//! role before the first 0x1f of each) rendered with one of the fixture models' templates
//! (chosen by the first byte). Compiling and rendering may fail, but must return an error and
//! never panic.
#![no_main]

use std::sync::OnceLock;

use df11_fuzz::chat::{ChatTemplate, Message};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The fixtures' `tokenizer_config.json` files (each model family's template).
const CONFIGS: [&str; 7] = [
    include_str!("../../tests/fixtures/models/qwen3-tiny/df11/tokenizer_config.json"),
    include_str!("../../tests/fixtures/models/qwen3-tied-tiny/df11/tokenizer_config.json"),
    include_str!("../../tests/fixtures/models/llama-tiny/df11/tokenizer_config.json"),
    include_str!("../../tests/fixtures/models/mistral-nemo-tiny/df11/tokenizer_config.json"),
    include_str!("../../tests/fixtures/models/qwen2-tiny/df11/tokenizer_config.json"),
    include_str!("../../tests/fixtures/models/gemma3-tiny/df11/tokenizer_config.json"),
    include_str!("../../tests/fixtures/models/phi4-tiny/df11/tokenizer_config.json"),
];

fn token(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(o) => o["content"].as_str().unwrap_or_default().to_string(),
        None => String::new(),
    }
}

fn fixture_templates() -> &'static [ChatTemplate] {
    static T: OnceLock<Vec<ChatTemplate>> = OnceLock::new();
    T.get_or_init(|| {
        CONFIGS
            .iter()
            .map(|c| {
                let v: Value = serde_json::from_str(c).expect("fixture JSON");
                let source = v["chat_template"].as_str().expect("a chat_template");
                ChatTemplate::new(
                    source.into(),
                    token(&v, "bos_token"),
                    token(&v, "eos_token"),
                )
                .expect("the fixture template compiles")
            })
            .collect()
    })
}

fn conversation() -> Vec<Message> {
    vec![
        Message::system("You are terse."),
        Message::user("What is 2 + 2?"),
        Message {
            role: "assistant".into(),
            content: "<think>\nadd\n</think>\n4".into(),
        },
        Message::user("  and 3 + 3?  "),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    if mode % 2 == 0 {
        let Ok(t) = ChatTemplate::new(text.into_owned(), "<s>".into(), "</s>".into()) else {
            return;
        };
        let thinking = [None, Some(true), Some(false)][(mode as usize / 2) % 3];
        let _ = t.render(&conversation(), mode & 8 != 0, thinking);
        let _ = t.render(&[], true, None);
    } else {
        let templates = fixture_templates();
        let t = &templates[(mode as usize / 2) % templates.len()];
        let messages: Vec<Message> = text
            .split('\u{1e}')
            .map(|m| match m.split_once('\u{1f}') {
                Some((role, content)) => Message {
                    role: role.into(),
                    content: content.into(),
                },
                None => Message::user(m),
            })
            .collect();
        let _ = t.render(&messages, mode & 64 != 0, Some(mode & 128 != 0));
    }
});
