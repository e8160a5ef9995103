//! What is particular to Llama: the llama3 RoPE scaling is what makes the logits match (the
//! shared reference tests would not notice a scaling applied wrongly otherwise), and generation
//! stops at any id of a list of EOS ids (Llama 3.1 lists several).

use candle_core::DType;
use df11_llm::testing::ModelUnderTest;
use df11_llm::testing::{copy_fixture, floats, ids, input, model_dir, reference, values};
use df11_llm::CausalLm;

const MODELS: [&str; 1] = ["llama-tiny"];

fn llama() -> ModelUnderTest {
    ModelUnderTest::of::<llama_df11::LlamaArch>(
        &MODELS,
        df11_llm::testing::binary("llama-df11", env!("CARGO_BIN_EXE_llama-df11")),
    )
    .with_vars(|name| std::env::var(name).ok())
}

#[test]
fn the_llama3_rope_scaling_is_what_matches() {
    // Without its `rope_scaling` the same weights miss the reference by far (by 8.5e-3, 85 times
    // the tolerance): the fixture's scaling changes most rotary frequencies, so the check above
    // really tests it.
    for name in MODELS {
        let r = reference(name);
        let plain = copy_fixture(&model_dir(name, "df11"), "", |c| {
            c["rope_scaling"] = serde_json::Value::Null
        });
        let mut loaded = llama().load_dir(plain.path(), false, DType::F32);
        let logits = loaded
            .model
            .forward(&input(&ids(&r["prompt_ids"])), 0)
            .unwrap();
        let got = values(&logits);
        let worst = got
            .iter()
            .zip(floats(&r["last_logits"]))
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0.0, f64::max);
        assert!(worst > 1e-3, "{name}: unscaled RoPE still within {worst:e}");
    }
}

#[test]
fn generation_stops_at_any_of_a_list_of_eos_ids() {
    // Make the reference's first greedy token one of a list of EOS ids: generation stops there.
    let name = MODELS[0];
    let r = reference(name);
    let first = ids(&r["greedy"]["tokens"])[0];
    let dir = copy_fixture(&model_dir(name, "df11"), "", |_| {});
    let path = dir.path().join("generation_config.json");
    let mut generation: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    generation["eos_token_id"] = serde_json::json!([2, first, 3]);
    std::fs::write(&path, generation.to_string()).unwrap();
    let out = std::process::Command::new(&llama().binary)
        .args(["--model-dir", dir.path().to_str().unwrap(), "--prompt"])
        .arg(r["prompt"].as_str().unwrap())
        .args([
            "--temperature",
            "0",
            "-n",
            "12",
            "--no-chat-template",
            "--cpu",
        ])
        .args(["--dtype", "f32", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&j["generated_tokens"]), vec![first]);
}
