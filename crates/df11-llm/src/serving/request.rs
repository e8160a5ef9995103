//! What a request is and what it hears: the types the scheduler, the server and the CLI share.

use std::time::Instant;

use tokenizers::Tokenizer;

use crate::chat::ChatTemplate;
use crate::sampling::SamplingParams;

/// Where a request's events go: a channel of the caller's choosing (the server's async one,
/// the CLI's blocking one).
pub trait EventSink: Send {
    /// Sends an event; false when the receiver is gone.
    fn send(&self, event: Event) -> bool;
    /// Whether the receiver is gone (the request is then cancelled).
    fn is_closed(&self) -> bool;
}

impl EventSink for std::sync::mpsc::Sender<Event> {
    fn send(&self, event: Event) -> bool {
        std::sync::mpsc::Sender::send(self, event).is_ok()
    }

    fn is_closed(&self) -> bool {
        // A std channel tells only on send; a gone receiver is found at the next event.
        false
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An EOS token or a stop sequence.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
}

impl FinishReason {
    /// OpenAI's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }
}

/// What a request hears from the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// More text.
    Text(String),
    /// The end: why, and the token counts.
    Done {
        /// Why it ended.
        reason: FinishReason,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens (an EOS token included).
        completion_tokens: usize,
        /// The generated ids (an EOS token included).
        tokens: Vec<u32>,
    },
    /// The model failed on this request.
    Failed(String),
}

/// A request for the scheduler.
pub struct Request {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Tokens to generate at most (`None`: until EOS or the context is full).
    pub max_tokens: Option<usize>,
    /// How tokens are chosen.
    pub sampling: SamplingParams,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Where the events go; dropping the receiver cancels the request.
    pub events: Box<dyn EventSink>,
    /// When the server received it (for the time to first token).
    pub received: Instant,
}

/// What the HTTP side needs to know of the model.
pub struct ModelInfo {
    /// Architecture name.
    pub arch: String,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template, if the model has one.
    pub chat_template: Option<ChatTemplate>,
    /// Positions a sequence may reach.
    pub max_context: usize,
    /// Sequences run at once.
    pub max_batch: usize,
    /// EOS ids and sampling defaults of the model's configs.
    pub defaults: crate::config::GenerationDefaults,
}

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is full.
    Full,
    /// The scheduler has stopped.
    Stopped,
}
