//! What became of a request: the one rule every count reads (the replay's tally and its
//! failed-request threshold, the run summary, the aiperf exports, `bmk_agentic`, the plot, the live
//! block, and the merge of a sharded run).
//!
//! A context overflow is an overflow whatever else it is; otherwise a cancellation is a
//! cancellation; otherwise any error is a failure; a request with none of these succeeded.

use crate::RequestRecord;

/// The outcome of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// No error and not cancelled.
    Ok,
    /// An error that is neither a cancellation nor a context overflow.
    Failed,
    /// Cancelled (at the end of the run, the threshold or an interrupt).
    Cancelled,
    /// The server refused the prompt as longer than its context (the scenario classifies).
    ContextOverflow,
}

impl Outcome {
    /// The rule, over the three facts a record carries.
    pub fn classify(context_overflow: bool, cancelled: bool, error: bool) -> Outcome {
        if context_overflow {
            Outcome::ContextOverflow
        } else if cancelled {
            Outcome::Cancelled
        } else if error {
            Outcome::Failed
        } else {
            Outcome::Ok
        }
    }

    /// The outcome of a record.
    pub fn of(record: &RequestRecord) -> Outcome {
        Outcome::classify(
            record.context_overflow,
            record.cancelled,
            record.error.is_some(),
        )
    }

    /// Whether the request succeeded.
    pub fn is_ok(self) -> bool {
        self == Outcome::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    #[test]
    fn overflow_then_cancellation_then_error() {
        assert_eq!(
            Outcome::classify(true, true, true),
            Outcome::ContextOverflow
        );
        assert_eq!(Outcome::classify(false, true, true), Outcome::Cancelled);
        assert_eq!(Outcome::classify(false, false, true), Outcome::Failed);
        assert_eq!(Outcome::classify(false, false, false), Outcome::Ok);
        assert!(Outcome::Ok.is_ok() && !Outcome::Cancelled.is_ok());
    }
}
