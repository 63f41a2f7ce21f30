//! softib-verbs-shim: run unmodified libibverbs applications on softib.
//!
//! Preloaded (`LD_PRELOAD=libsoftib_verbs_shim.so`), this library takes over the public
//! entry points of libibverbs (device list, open, query, PD/MR/CQ/QP/SRQ/AH, completion
//! channels, async events) and installs its own data-path functions in the context's
//! `ops` table, which the inline verbs of `<infiniband/verbs.h>` (`ibv_post_send`,
//! `ibv_poll_cq`, ...) call. Behind them is one softib device per process: the
//! `softib-transport` engine on a RoCEv2 UDP socket (`softib-net`). No kernel RDMA device
//! is involved. See docs/verbs-shim.md.
//!
//! Layout: [`abi`] holds the C structures (checked against the installed header by
//! `tests/layout.rs`), [`config`] the environment, [`convert`] the safe translations
//! between C values and engine values; `unsafe` lives only in `sys` (eventfd), `ffi` (the
//! exported C functions) and `interpose` (the libc file calls that lead sysfs and
//! `/dev/infiniband` paths into the device view, [`view`]), with a `// SAFETY:` comment on
//! every block. The engine's view of an application buffer is softib-net's
//! `raw_memory::RawMemory`, the one softib-net's own raw registration uses. [`rdmacm`] is the
//! librdmacm layer (rdma_cm ids and events on softib's CM); its unsafe modules are named in
//! its documentation.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod abi;
pub mod abi_ex;
mod caps;
pub mod config;
pub mod convert;
pub mod cq_ex;
pub mod device_memory;
pub mod domain;
mod events;
mod ffi;
mod interpose;
mod layout_check;
mod objects;
mod process_memory;
pub mod rdmacm;
mod sys;
mod validate;
pub mod view;
pub mod wr_batch;
