//! The device as the kernel would show it, with no kernel: the sysfs directories
//! `/sys/class/infiniband/<dev>` and `/sys/class/infiniband_verbs/uverbsN` and the device
//! node `/dev/infiniband/uverbsN`, which real RDMA software (UCX, libfabric, pyverbs'
//! tests) reads to find and describe a device before it opens it through the verbs.
//!
//! The files are generated from [`facts::DeviceFacts`], the same values the verbs return,
//! and written once to a private directory ([`tree`]); the `interpose` module sends a
//! program's file calls on those three prefixes there. See docs/verbs-shim.md, "The device
//! as the kernel shows it", for why this mechanism.

pub mod facts;
pub mod sysfs;
pub mod tree;

use std::path::PathBuf;
use std::sync::OnceLock;

/// The root of this process's view (the directory standing for `/`), built on first use;
/// None when there is no device (bad configuration) or the tree cannot be written (said
/// once on stderr): the viewed paths then do not exist, as on a host without RDMA.
pub fn root() -> Option<&'static PathBuf> {
    static ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dev = crate::objects::device().ok()?;
        let entries = sysfs::render(&dev.facts, &tree::host_facts());
        match tree::materialize(&entries) {
            Ok(root) => Some(root),
            Err(e) => {
                eprintln!(
                    "softib verbs shim: cannot write the device view ({e}); {} and {} \
                     will look empty",
                    facts::IB_CLASS,
                    facts::DEV_DIR
                );
                None
            }
        }
    })
    .as_ref()
}
