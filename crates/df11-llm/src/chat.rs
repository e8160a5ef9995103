//! The repo's chat template (`tokenizer_config.json` → `chat_template`, or `chat_template.jinja`),
//! rendered with minijinja the way transformers' `apply_chat_template` does: `trim_blocks` and
//! `lstrip_blocks` on, Python string methods through minijinja-contrib's pycompat, and the
//! `raise_exception` / `strftime_now` helpers HF templates call.

use std::path::Path;

use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;
use serde_json::Value;

use crate::config::read_json;
use crate::error::{LlmError, Result};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: "user".into(),
            content: content.into(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: "system".into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template with the special tokens it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// A special token in `tokenizer_config.json`: a string or `{"content": …}`.
fn token_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// The template source in `chat_template`: a string, or a list of named templates (`default`).
fn template_source(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .or_else(|| list.first())
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    }
}

impl ChatTemplate {
    /// The template of the model in `dir`, or `None` if it has none.
    pub fn from_dir(dir: &Path) -> Result<Option<Self>> {
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.is_file() {
            read_json(&config_path)?
        } else {
            Value::Null
        };
        let jinja = dir.join("chat_template.jinja");
        let source = if jinja.is_file() {
            Some(std::fs::read_to_string(&jinja).map_err(|e| LlmError::io(&jinja, e))?)
        } else {
            config.get("chat_template").and_then(template_source)
        };
        source
            .map(|s| {
                Self::new(
                    s,
                    token_text(config.get("bos_token")),
                    token_text(config.get("eos_token")),
                )
            })
            .transpose()
    }

    /// Compiles a template.
    pub fn new(source: String, bos_token: String, eos_token: String) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        let source = without_generation_blocks(&source);
        namespaces::check(&source)?;
        env.add_template_owned("chat", source)?;
        Ok(Self {
            env,
            bos_token,
            eos_token,
        })
    }

    /// Renders `messages`. `enable_thinking` is passed to the template when set (Qwen3).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String> {
        // A template from an unknown repo must not run for ever: real chat templates take a few
        // hundred instructions a message, a hostile one (loops over the characters of the
        // conversation, nested) stops with an error once its fuel is spent. The budget grows with
        // the conversation (a clone of the environment carries it: compiled templates are small).
        let mut env = self.env.clone();
        env.set_fuel(Some(FUEL_BASE + FUEL_PER_MESSAGE * messages.len() as u64));
        let template = env.get_template("chat")?;
        let ctx = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        let ctx = match enable_thinking {
            Some(t) => context! { enable_thinking => t, ..ctx },
            None => ctx,
        };
        Ok(template.render(ctx)?)
    }
}

/// Instructions a rendering may run (minijinja's fuel): a base, and a budget per message about
/// ten times what a realistic template takes.
const FUEL_BASE: u64 = 500_000;
const FUEL_PER_MESSAGE: u64 = 2_000;

/// Rewrites transformers' `{% generation %}` … `{% endgeneration %}` blocks (they mark the
/// assistant's tokens for training masks and render their body unchanged; e.g. Phi-4-reasoning)
/// as `{% if true %}` … `{% endif %}`, which minijinja knows, keeping whitespace control.
fn without_generation_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        // The closing `%}` after the opening `{%` (in `{%}` they share the `%`).
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            break;
        };
        let inner = &tag[2..end];
        let open = inner.strip_prefix(['-', '+']).map_or("", |_| &inner[..1]);
        let body = &inner[open.len()..];
        let close = body
            .strip_suffix(['-', '+'])
            .map_or("", |_| &body[body.len() - 1..]);
        let word = body[..body.len() - close.len()].trim();
        let replacement = match word {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => out.push_str(&format!("{{%{open} {r} {close}%}}")),
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Keeps a template from building a cycle of `namespace()` objects (see the module). A path
/// relative to this file, so that the fuzz build, which compiles this file alone, finds it too.
#[path = "chat/namespaces.rs"]
mod namespaces;

fn raise_exception(message: String) -> std::result::Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)` on the current UTC date (Llama 3 templates): `%d %m %Y %y %b %B`.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_date(secs / 86_400, &format)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Formats the date `days` days after 1970-01-01 (proleptic Gregorian calendar).
fn format_date(days: u64, format: &str) -> String {
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('b') => out.push_str(&name[..3]),
            Some('B') => out.push_str(name),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generation-prompt tail of Qwen3's template, with its `enable_thinking` switch and
    /// Python string methods.
    const QWEN3_LIKE: &str = "{%- for message in messages %}\n    {{- '<|im_start|>' + message.role + '\\n' + message.content.strip() + '<|im_end|>\\n' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}";

    #[test]
    fn thinking_switch_and_pycompat() {
        let t = ChatTemplate::new(QWEN3_LIKE.into(), String::new(), String::new()).unwrap();
        let msgs = [Message::user("  hi ")];
        let base = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(t.render(&msgs, true, None).unwrap(), base);
        assert_eq!(t.render(&msgs, true, Some(true)).unwrap(), base);
        assert_eq!(
            t.render(&msgs, true, Some(false)).unwrap(),
            format!("{base}<think>\n\n</think>\n\n")
        );
    }

    #[test]
    fn trim_and_lstrip_blocks_like_transformers() {
        let src = "{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}";
        let t = ChatTemplate::new(src.into(), String::new(), String::new()).unwrap();
        assert_eq!(
            t.render(&[Message::user("a")], false, None).unwrap(),
            "[a]\n"
        );
    }

    #[test]
    fn generation_blocks_render_their_body() {
        // The shape of Phi-4-reasoning's template.
        let src = "{% for m in messages %}{% if m.role == 'assistant' %}<a>{% generation %}{{ m.content + '<end>' }}{% endgeneration %}{% else %}<u>{{ m.content }}<end>{% endif %}{% endfor %}{%- generation -%}\n x {%+ endgeneration +%}";
        let t = ChatTemplate::new(src.into(), String::new(), String::new()).unwrap();
        let msgs = [
            Message::user("q"),
            Message {
                role: "assistant".into(),
                content: "r".into(),
            },
        ];
        assert_eq!(
            t.render(&msgs, false, None).unwrap(),
            "<u>q<end><a>r<end>x "
        );
        assert_eq!(
            without_generation_blocks("{%- generation %}{{ '%}' }}{%endgeneration-%}{% if x %}"),
            "{%- if true %}{{ '%}' }}{% endif -%}{% if x %}"
        );
    }

    /// Found by the `chat_template` fuzz target: `{%}` made the rewrite slice `tag[2..1]`.
    #[test]
    fn overlapping_tag_delimiters_are_an_error_not_a_panic() {
        assert_eq!(without_generation_blocks("{%}"), "{%}");
        assert_eq!(without_generation_blocks("a{%}b%}c"), "a{%}b%}c");
        for src in ["{%}", "\u{be} x }} {%}}\0if %}", "{%-}", "{%+%}"] {
            assert!(ChatTemplate::new(src.into(), String::new(), String::new()).is_err());
        }
    }

    /// Found by the `chat_template` fuzz target: `{% set ns.n = ns %}{{ ns.n }}` made minijinja
    /// recurse through the namespace until the stack overflowed (a process abort).
    #[test]
    fn namespaces_that_could_contain_namespaces_are_refused() {
        let refused = [
            "{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns.n }}",
            "{% set a = namespace() %}{% set b = namespace() %}{% set a.x = b %}{% set b.x = a %}",
            "{% set ns = namespace() %}{% set ns.l = [1, ns] %}",
            "{% set ns = namespace() %}{% set alias = ns %}{% set ns.x = alias %}",
            "{% set ns = namespace() %}{{ ns }}",
            "{% set ns = namespace() %}{{ ns | tojson }}",
            "{% set ns = namespace() %}{% for x in [ns] %}{% set ns.x = x %}{% endfor %}",
            "{% set ns = namespace() %}{% macro m(a) %}{% set ns.a = a %}{% endmacro %}{{ m(ns) }}",
            "{% set ns = namespace(inner=namespace()) %}",
            "{% set f = namespace %}{% set ns = f() %}",
            "{% with ns = namespace() %}{% set ns.x = ns %}{% endwith %}",
        ];
        for src in refused {
            let err = ChatTemplate::new(src.into(), String::new(), String::new()).unwrap_err();
            assert!(err.to_string().contains("namespace"), "{src}: {err}");
        }
        // The way chat templates use them: flags and counters read and set through attributes.
        let src = "{% set ns = namespace(n=0, last=messages|length - 1, seen=false) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% if ns['last'] == loop.index0 %}{% set ns.seen = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.seen }}";
        let t = ChatTemplate::new(src.into(), String::new(), String::new()).unwrap();
        let msgs = [Message::user("a"), Message::user("b")];
        assert_eq!(t.render(&msgs, false, None).unwrap(), "2 True");
    }

    /// Found by the `chat_template` fuzz target: the error of this render carries a source span
    /// that ends before it starts, and minijinja's alternate error form (with a source excerpt)
    /// panicked drawing it (`"^".repeat(end - start)`).
    #[test]
    fn errors_with_broken_spans_are_reported_not_panicked() {
        let src = "{% for   in messages %}{% endfor %}";
        let t = ChatTemplate::new(src.into(), String::new(), String::new()).unwrap();
        let err = t.render(&[Message::user("a")], false, None).unwrap_err();
        assert!(
            matches!(err, LlmError::Template(ref m) if m.contains("chat:1")),
            "{err}"
        );
    }

    #[test]
    fn raise_exception_is_an_error() {
        let src = "{{ raise_exception('only user turns') }}";
        let t = ChatTemplate::new(src.into(), String::new(), String::new()).unwrap();
        let err = t.render(&[], true, None).unwrap_err();
        assert!(matches!(err, LlmError::Template(ref m) if m.contains("only user turns")));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(format_date(0, "%d %b %Y"), "01 Jan 1970");
        // 2024-02-29 is day 19782.
        assert_eq!(
            format_date(19_782, "%Y-%m-%d %B %y %%"),
            "2024-02-29 February 24 %"
        );
    }

    #[test]
    fn special_tokens_as_string_or_object() {
        assert_eq!(token_text(Some(&serde_json::json!("<s>"))), "<s>");
        assert_eq!(
            token_text(Some(&serde_json::json!({"content": "<bos>"}))),
            "<bos>"
        );
        assert_eq!(token_text(None), "");
    }

    /// A template that loops over the characters of the conversation, nested (the shape of one
    /// the `chat_template` fuzz target found running for over 10 s), stops with an error once
    /// its fuel is spent; a template of real templates' shape (a reverse scan with a namespace,
    /// per-message branches and string methods) renders 5000 messages within it.
    #[test]
    fn rendering_is_bounded_in_instructions() {
        let long: Vec<Message> = (0..40)
            .map(|i| Message::user("x".repeat(200 + i)))
            .collect();
        let hostile = "{% for a in messages|string %}{% for b in messages|string %}{{ a }}\
                       {% endfor %}{% endfor %}";
        let t = ChatTemplate::new(hostile.into(), String::new(), String::new()).unwrap();
        let e = t.render(&long, true, None).unwrap_err().to_string();
        assert!(e.contains("fuel"), "{e}");

        let realistic = "{%- set ns = namespace(last_query=messages|length - 1) %}\
            {%- for m in messages[::-1] %}{%- set i = messages|length - 1 - loop.index0 %}\
            {%- if m.role == 'user' and not m.content.startswith('<tool_response>') %}\
            {%- set ns.last_query = [ns.last_query, i]|min %}{%- endif %}{%- endfor %}\
            {%- for m in messages %}{%- if m.role == 'user' or m.role == 'system' %}\
            {{- '<|im_start|>' + m.role + '\\n' + m.content.strip() + '<|im_end|>\\n' }}\
            {%- elif m.role == 'assistant' %}{%- set c = m.content %}\
            {%- if '</think>' in c %}{%- set c = c.split('</think>')[-1].lstrip('\\n') %}{%- endif %}\
            {{- '<|im_start|>assistant\\n' + c + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}\
            {%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
        let t = ChatTemplate::new(realistic.into(), String::new(), String::new()).unwrap();
        let conversation: Vec<Message> = (0..5000)
            .map(|i| Message {
                role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
                content: format!("message {i} <think>x</think>\n answer"),
            })
            .collect();
        let text = t.render(&conversation, true, None).unwrap();
        assert_eq!(text.matches("<|im_start|>").count(), 5001);
    }
}
