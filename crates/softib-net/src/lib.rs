//! softib-net. See `shared/design/ARCHITECTURE.md` for this crate's job.
