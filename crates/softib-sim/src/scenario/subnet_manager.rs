//! `[subnet_manager]`: who configures the fabric. Without the table (or with `external =
//! false`) softib's own routing assigns LIDs and forwarding tables at build time, as if an
//! SM had already swept. With `external = true` the fabric powers up as a real one does,
//! ports in Init, no LIDs, empty forwarding tables, and waits for an SM run by the user
//! (stock OpenSM under `ibsim-run`, see `softib sim --serve`) on the HCA `host`. A run
//! without `--serve` has no SM to wait for and routes with softib's own engine, as if the
//! SM had already swept.
//!
//! ```toml
//! [subnet_manager]
//! external = true
//! host = "h0"        # the HCA the SM runs on; default the first HCA
//! ```

use super::source::{ScenarioError, Source};
use serde::Deserialize;
use softib_fabric::topology::{NodeKind, Topology};
use toml::Spanned;

/// The `[subnet_manager]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubnetManagerSection {
    /// An external SM brings the fabric up.
    #[serde(default)]
    pub external: bool,
    /// The HCA the external SM runs on.
    pub host: Option<Spanned<String>>,
}

impl SubnetManagerSection {
    /// The node index of the SM's HCA when the SM is external, `None` when softib routes;
    /// a `host` that is no HCA of `topo` is an error naming it.
    pub fn sm_host(&self, topo: &Topology, src: &Source) -> Result<Option<usize>, ScenarioError> {
        if !self.external {
            return Ok(None);
        }
        match &self.host {
            None => Ok(topo.nodes.iter().position(|n| n.kind == NodeKind::Hca)),
            Some(h) => match topo.node_by_name(h.get_ref()) {
                Some(i) if topo.nodes[i].kind == NodeKind::Hca => Ok(Some(i)),
                Some(_) => src.invalid(
                    "subnet_manager.host",
                    h.span(),
                    format!("`{}` is a switch; the SM runs on an HCA", h.get_ref()),
                ),
                None => src.invalid(
                    "subnet_manager.host",
                    h.span(),
                    format!("no node `{}` in the topology", h.get_ref()),
                ),
            },
        }
    }
}
