//! Serving many requests on one model: the continuous-batching scheduler (a thread that owns the
//! [`crate::Engine`], admits requests into free sequence slots between decode steps and streams
//! each one's text as events), stop sequences over streamed text, and the counters a server
//! reports. The `df11-server` crate puts HTTP in front of it; the CLI runs batches of prompts
//! and the chat through it.

mod batch_loop;
pub mod metrics;
pub mod request;
pub mod scheduler;
pub mod stop;

pub use metrics::Metrics;
pub use request::{Event, EventSink, FinishReason, ModelInfo, Request, SubmitError};
pub use scheduler::Scheduler;
pub use stop::StopText;
