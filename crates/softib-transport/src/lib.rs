//! softib-transport. See `shared/design/ARCHITECTURE.md` for this crate's job.
#![forbid(unsafe_code)]
