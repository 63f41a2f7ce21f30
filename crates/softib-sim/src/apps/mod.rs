//! The traffic applications that run on the fabric's HCAs during an experiment: the
//! perftest-like engine flows of `[[flow]]` tables ([`flow`]), the raw packet generator of
//! `[[stream]]` tables ([`stream`]), and perftest's own loops with the QP bring-up they need
//! ([`perftest`], used by the `perf` example and the tests).

pub mod flow;
pub mod perftest;
pub mod stream;
