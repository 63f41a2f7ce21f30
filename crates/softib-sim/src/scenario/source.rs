//! Where a scenario's values sit in its file: [`ScenarioError`], which names the key and
//! the line, and [`Source`], the text that turns a value's span into that line.
//!
//! Every table module checks its own values and reports through a [`Source`], so an error
//! found anywhere points at the line of the value it rejects.

use softib_fabric::fabric::BuildError;

/// A scenario error, with the key and line where it applies.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Syntax, unknown key or wrongly typed value (the message names key, line and column).
    /// Transparent, so that a chain of causes does not print the message twice.
    #[error(transparent)]
    Parse(#[from] toml::de::Error),
    /// A value that parsed but makes no sense.
    #[error("line {line}: {key}: {reason}")]
    Invalid {
        /// Dotted key.
        key: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The fabric could not be built from otherwise valid settings.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The text of a scenario file, for turning the span of a value (`toml::Spanned`) into
/// its line.
#[derive(Clone, Debug, Default)]
pub struct Source {
    text: String,
}

impl Source {
    /// The source of `text`.
    pub fn new(text: &str) -> Self {
        Source {
            text: text.to_string(),
        }
    }

    /// The 1-based line of the byte offset where `span` starts.
    pub fn line(&self, span: std::ops::Range<usize>) -> usize {
        self.text[..span.start.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    /// A [`ScenarioError::Invalid`] for `key` at the line of `span`.
    pub fn error_at(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        reason: String,
    ) -> ScenarioError {
        ScenarioError::Invalid {
            key: key.to_string(),
            line: self.line(span),
            reason,
        }
    }

    /// [`Source::error_at`] as the `Err` of a `Result`.
    pub fn invalid<T>(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        reason: String,
    ) -> Result<T, ScenarioError> {
        Err(self.error_at(key, span, reason))
    }
}
