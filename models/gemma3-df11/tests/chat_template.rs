//! `<end_of_turn>` ends generation, whatever the configs list (the chat template itself is
//! checked against transformers by the shared tests).

use candle_core::DType;
use df11_llm::testing::{copy_fixture, model_dir, ModelUnderTest};

const NAME: &str = "gemma3-tiny";

fn gemma() -> ModelUnderTest {
    ModelUnderTest::of::<gemma3_df11::Gemma3Arch>(&[NAME], "gemma3-df11".into())
        .with_vars(|name| std::env::var(name).ok())
}

#[test]
fn end_of_turn_and_eos_stop_generation() {
    let loaded = gemma().load_fixture(NAME, "df11", DType::F32);
    let eos = &loaded.defaults.eos_token_ids;
    for token in ["<eos>", "<end_of_turn>"] {
        let id = loaded.tokenizer.token_to_id(token).unwrap();
        assert!(eos.contains(&id), "{token} ({id}) not in {eos:?}");
    }
}

#[test]
fn end_of_turn_stops_even_when_the_configs_omit_it() {
    // A repo whose configs list only <eos>: <end_of_turn> is still a stop token.
    let tmp = copy_fixture(&model_dir(NAME, "df11"), "generation_config.json", |c| {
        c["eos_token_id"] = serde_json::json!(1)
    });
    let loaded = gemma().load_dir(tmp.path(), false, DType::F32);
    let end_of_turn = loaded.tokenizer.token_to_id("<end_of_turn>").unwrap();
    assert_eq!(loaded.defaults.eos_token_ids, [1, end_of_turn]);
}
