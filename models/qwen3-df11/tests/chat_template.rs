//! The repo's chat template, rendered with minijinja, equals transformers' rendering recorded in
//! reference.json (`chat_template_check`), text and ids.

mod common;

use common::*;
use df11_llm::{encode, load_tokenizer, ChatTemplate, Message};

#[test]
fn chat_template_matches_transformers() {
    for name in MODELS {
        let check = &reference(name)["chat_template_check"];
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
        for kind in ["df11", "bf16"] {
            let dir = model_dir(name, kind);
            let template = ChatTemplate::from_dir(&dir)
                .unwrap()
                .expect("the fixture has a chat template");
            let want = check["rendered"].as_str().unwrap();
            // The CLI passes enable_thinking; a template that does not use it is unaffected.
            for thinking in [None, Some(false)] {
                let got = template.render(&messages, true, thinking).unwrap();
                assert_eq!(got, want, "{name}/{kind} thinking={thinking:?}");
            }
            let tokenizer = load_tokenizer(&dir).unwrap();
            let got_ids = encode(&tokenizer, want, false).unwrap();
            assert_eq!(got_ids, ids(&check["ids"]), "{name}/{kind}");
        }
    }
}
