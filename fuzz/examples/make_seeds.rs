//! Writes the fuzz targets' seed corpora (`fuzz/seeds/<target>/`) from the fixtures in
//! `tests/fixtures`: small units re-encoded from the fixture models' BF16 weights, the real
//! Qwen3-4B canary unit, the fixtures' config.json and chat templates, and request bodies.
//! Run by `bash scripts/fuzz.sh seeds`; the output is deterministic.

use std::path::{Path, PathBuf};

use df11_candle::{encode_unit, RawTensor, UnitTensors};
use df11_fuzz::{RawUnit, FIELDS};
use safetensors::{Dtype, SafeTensors};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

const MODELS: [&str; 7] = [
    "qwen3-tiny",
    "qwen3-tied-tiny",
    "llama-tiny",
    "mistral-nemo-tiny",
    "qwen2-tiny",
    "gemma3-tiny",
    "phi4-tiny",
];

const LAYER: [&str; 7] = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
];

/// The BF16 bytes of a tensor of a fixture's original (bf16) folder.
fn weight(model: &str, name: &str) -> Vec<u8> {
    let path = fixtures().join(format!("models/{model}/bf16/model.safetensors"));
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensor(name).unwrap().data().to_vec()
}

/// The first `n` weights of each named fixture tensor, encoded as one unit.
fn unit_of(model: &str, names: &[String], n: usize) -> RawUnit {
    let members: Vec<Vec<u8>> = names
        .iter()
        .map(|m| weight(model, m)[..2 * n].to_vec())
        .collect();
    let refs: Vec<&[u8]> = members.iter().map(Vec::as_slice).collect();
    RawUnit::of(&encode_unit(&refs).unwrap().tensors())
}

/// `n` weights taken from all of a layer's matrices, as one member.
fn long_unit(model: &str, n: usize) -> RawUnit {
    let mut all = Vec::new();
    for m in LAYER {
        all.extend(weight(model, &format!("model.layers.0.{m}.weight")));
    }
    RawUnit::of(&encode_unit(&[&all[..2 * n]]).unwrap().tensors())
}

fn layer_names(prefix: &str) -> Vec<String> {
    LAYER
        .iter()
        .map(|m| format!("{prefix}.{m}.weight"))
        .collect()
}

/// The real Qwen3-4B unit slice of `tests/fixtures/canary` (max code length 27, 5 LUT rows).
fn canary() -> RawUnit {
    let bytes = std::fs::read(fixtures().join("canary/qwen3-4b-layer0-slice.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut u = RawUnit::default();
    for (i, f) in FIELDS.iter().enumerate() {
        u.fields[i] = st.tensor(f).unwrap().data().to_vec();
    }
    u
}

/// A safetensors file of units (their six tensors under `<name>.<field>`) and plain tensors.
fn safetensors_file(units: &[(&str, &RawUnit)], plain: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut shapes: Vec<(String, Dtype, Vec<usize>, &[u8])> = Vec::new();
    for (name, u) in units {
        for (i, f) in FIELDS.iter().enumerate() {
            let data = &u.fields[i][..];
            let (dtype, shape) = match *f {
                "luts" => (Dtype::U8, vec![data.len() / 256, 256]),
                "split_positions" => (Dtype::I64, vec![data.len() / 8]),
                _ => (Dtype::U8, vec![data.len()]),
            };
            shapes.push((format!("{name}.{f}"), dtype, shape, data));
        }
    }
    for (name, data) in plain {
        shapes.push((name.to_string(), Dtype::BF16, vec![data.len() / 2], data));
    }
    let views = shapes.iter().map(|(n, dtype, shape, data)| {
        (
            n.clone(),
            RawTensor {
                dtype: *dtype,
                shape,
                data,
            },
        )
    });
    safetensors::serialize(views, None).unwrap()
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), bytes).unwrap();
}

fn with_mode(mode: u8, bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![mode];
    v.extend_from_slice(bytes);
    v
}

fn main() {
    let out = PathBuf::from(std::env::args().nth(1).expect("usage: make_seeds OUT_DIR"));
    if out.exists() {
        std::fs::remove_dir_all(&out).unwrap();
    }

    // Units: a single matrix, a 7-member layer, one element, two blocks, and the real canary.
    let lm_head = unit_of("qwen3-tiny", &["lm_head.weight".into()], 300);
    let layer = unit_of("qwen3-tiny", &layer_names("model.layers.0"), 40);
    let phi_members = [
        "self_attn.o_proj",
        "self_attn.qkv_proj",
        "mlp.gate_up_proj",
        "mlp.down_proj",
    ];
    let phi_names: Vec<String> = phi_members
        .iter()
        .map(|m| format!("model.layers.1.{m}.weight"))
        .collect();
    let phi = unit_of("phi4-tiny", &phi_names, 64);
    let one = unit_of("llama-tiny", &["lm_head.weight".into()], 1);
    let two_blocks = long_unit("mistral-nemo-tiny", 13_000);
    let canary = canary();
    let _: UnitTensors<'_> = canary.tensors();
    let units = [
        ("lm_head-300", &lm_head),
        ("layer-7x40", &layer),
        ("phi-4x64", &phi),
        ("one-element", &one),
        ("two-blocks", &two_blocks),
        ("canary-qwen3-4b", &canary),
    ];
    for (name, u) in units {
        write(&out, "unit_decode", name, &u.to_bytes());
        write(&out, "packed", name, &with_mode(0, &u.to_bytes()));
    }
    // Packer, weights form: 2 cut points (members of 1024, 1000 and 976 weights).
    let w = weight("qwen2-tiny", "model.layers.1.mlp.up_proj.weight");
    let mut input = vec![1u8, 2];
    input.extend_from_slice(&1024u16.to_le_bytes());
    input.extend_from_slice(&2024u16.to_le_bytes());
    input.extend_from_slice(&w[..2 * 3000]);
    write(&out, "packed", "weights-3-members", &input);
    let mut input = vec![3u8, 0];
    input.extend_from_slice(&w[..2 * 37]);
    write(&out, "packed", "weights-37", &input);

    // Safetensors files: the fixture's leftover file, small units with a plain tensor, two blocks.
    let plain = std::fs::read(fixtures().join("models/qwen3-tiny/df11/model.safetensors")).unwrap();
    write(&out, "safetensors_index", "model-plain", &plain);
    let norm = weight("qwen3-tiny", "model.norm.weight");
    let file = safetensors_file(
        &[("lm_head", &lm_head), ("model.layers.0", &layer)],
        &[("model.norm.weight", norm.clone())],
    );
    write(&out, "safetensors_index", "units-small", &file);
    let file = safetensors_file(&[("model.embed_tokens", &two_blocks)], &[]);
    write(&out, "safetensors_index", "unit-two-blocks", &file);

    // config.json: every fixture's DF11 config, a plain one, the legacy form.
    for m in MODELS {
        let c = std::fs::read(fixtures().join(format!("models/{m}/df11/config.json"))).unwrap();
        write(&out, "config", &format!("{m}-df11"), &c);
    }
    let c = std::fs::read(fixtures().join("models/llama-tiny/bf16/config.json")).unwrap();
    write(&out, "config", "llama-tiny-bf16", &c);
    write(
        &out,
        "config",
        "legacy-0.1.0",
        br#"{"dfloat11_version": "0.1.0"}"#,
    );
    write(
        &out,
        "config",
        "rope-parameters",
        br#"{"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1,
 "num_attention_heads": 2, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0},
 "eos_token_id": [1, 2], "dfloat11_config": {"version": "0.2.0", "threads_per_block": 512,
 "bytes_per_thread": 8, "pattern_dict": {"model\\.layers\\.\\d+": ["mlp.down_proj"], "lm_head|x": []}}}"#,
    );

    // Chat templates (mode byte even) and conversations for the fixture templates (odd).
    for (i, m) in MODELS.iter().enumerate() {
        let c = std::fs::read(fixtures().join(format!("models/{m}/df11/tokenizer_config.json")))
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&c).unwrap();
        let t = v["chat_template"].as_str().unwrap();
        write(
            &out,
            "chat_template",
            &format!("template-{m}"),
            &with_mode(0, t.as_bytes()),
        );
        let convo = "system\u{1f}Be brief.\u{1e}user\u{1f}Hi {{ x }} {% if %}\u{1e}assistant\u{1f}<think>\n</think>\nHello\u{1e}user\u{1f}Again";
        write(
            &out,
            "chat_template",
            &format!("conversation-{m}"),
            &with_mode(1 + 2 * i as u8, convo.as_bytes()),
        );
    }
    let extra = [
        "{%- macro m(x) -%}[{{ x | upper }}]{%- endmacro -%}{% for message in messages %}{{ m(message.content.strip()) }}{% if loop.last and add_generation_prompt %}{{ bos_token ~ eos_token }}{% endif %}{% endfor %}",
        "{% set ns = namespace(n=0) %}{% for m in messages|reverse %}{% set ns.n = ns.n + 1 %}{{ m['role'] }}:{{ m.content.split('\\n')|join(' ') }}{% endfor %}{{ ns.n }}{{ messages|tojson }}",
        "{%- generation -%}{{ strftime_now('%d %b %Y') }}{%+ endgeneration +%}{% if messages|length > 3 %}{{ raise_exception('too long') }}{% endif %}",
        "{{ messages[0]['content'][1:3] }}{{ (messages|map(attribute='role')|list)[-1] }}{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}",
    ];
    for (i, t) in extra.iter().enumerate() {
        write(
            &out,
            "chat_template",
            &format!("template-extra-{i}"),
            &with_mode(2 * i as u8, t.as_bytes()),
        );
    }

    // Request bodies.
    let bodies = [
        r#"{"model": "df11", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 5, "temperature": 0, "stop": "x", "stream": true, "stream_options": {"include_usage": true}}"#,
        r#"{"model": "df11", "messages": [{"role": "developer", "content": null}, {"role": "assistant", "content": "a"}], "max_completion_tokens": 4096, "top_p": 0.5, "seed": 7, "n": 1, "stop": ["a", "b", "c", "d"]}"#,
        r#"{"model": "df11", "prompt": "Once upon", "max_tokens": 16, "temperature": 1.5}"#,
        r#"{"model": "df11", "prompt": ["one", "two"], "stop": []}"#,
        r#"{"model": "other", "messages": [{"role": "robot", "content": [{"type": "image_url"}]}], "max_tokens": -3, "n": 2}"#,
    ];
    for (i, b) in bodies.iter().enumerate() {
        write(&out, "server_request", &format!("body-{i}"), b.as_bytes());
    }
    eprintln!("seeds written to {}", out.display());
}
