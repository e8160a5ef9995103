//! The repo's chat template, rendered with minijinja, equals transformers' rendering recorded in
//! reference.json (`chat_template_check`), text and ids; `<end_of_turn>` ends generation.

mod common;

use candle_core::DType;
use common::*;
use df11_llm::{encode, load_tokenizer, ChatTemplate, Message};

#[test]
fn chat_template_matches_transformers() {
    let check = &reference(NAME)["chat_template_check"];
    assert_eq!(check["add_generation_prompt"], true);
    let messages: Vec<Message> = check["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Message {
            role: m["role"].as_str().unwrap().to_string(),
            content: m["content"].as_str().unwrap().to_string(),
        })
        .collect();
    let want = check["rendered"].as_str().unwrap();
    for kind in ["df11", "bf16"] {
        let dir = model_dir(NAME, kind);
        let template = ChatTemplate::from_dir(&dir)
            .unwrap()
            .expect("the fixture has a chat template");
        // The CLI passes enable_thinking; Gemma's template ignores it.
        for thinking in [None, Some(false)] {
            let got = template.render(&messages, true, thinking).unwrap();
            assert_eq!(got, want, "{kind} thinking={thinking:?}");
        }
        let tokenizer = load_tokenizer(&dir).unwrap();
        assert_eq!(
            encode(&tokenizer, want, false).unwrap(),
            ids(&check["ids"]),
            "{kind}"
        );
    }
}

#[test]
fn end_of_turn_and_eos_stop_generation() {
    let loaded = load_fixture("df11", DType::F32);
    let eos = &loaded.defaults.eos_token_ids;
    for token in ["<eos>", "<end_of_turn>"] {
        let id = loaded.tokenizer.token_to_id(token).unwrap();
        assert!(eos.contains(&id), "{token} ({id}) not in {eos:?}");
    }
}

#[test]
fn end_of_turn_stops_even_when_the_configs_omit_it() {
    // A repo whose configs list only <eos>: <end_of_turn> is still a stop token.
    let src = model_dir(NAME, "df11");
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "generation_config.json" {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
        }
    }
    let config_path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["eos_token_id"] = serde_json::json!(1);
    std::fs::write(&config_path, config.to_string()).unwrap();
    let loaded = load_dir(tmp.path(), false, DType::F32);
    let end_of_turn = loaded.tokenizer.token_to_id("<end_of_turn>").unwrap();
    assert_eq!(loaded.defaults.eos_token_ids, [1, end_of_turn]);
}
