//! Link up and down (IBA 7.2, 7.9.4.1): a scheduled link-state change takes both ends of a
//! cable down or up together; going down discards what is queued for the link and counts
//! LinkDowned, coming up re-advertises the receive buffers.

use super::{BuildError, Event, Fabric};
use crate::port::{Source, DATA_VLS, NO_PEER};
use crate::time::Picos;

impl Fabric {
    /// Schedules the link at port `port` of node `name` to go down (`up` false) or come back
    /// up at time `at`; both ends change together.
    pub fn schedule_link_state(
        &mut self,
        name: &str,
        port: u8,
        at: Picos,
        up: bool,
    ) -> Result<(), BuildError> {
        let gp = self
            .port_index(name, port)
            .ok_or_else(|| BuildError::Setting {
                key: "link_state",
                reason: format!("no port {port} on a node called `{name}`"),
            })?;
        if self.ports[gp].peer == NO_PEER {
            return Err(BuildError::Setting {
                key: "link_state",
                reason: format!("port {port} of `{name}` has no cable"),
            });
        }
        self.current = 0;
        self.schedule(
            at,
            Event::LinkState {
                port: gp as u32,
                up,
            },
        );
        Ok(())
    }

    /// The link of port `q` goes down (IBA 7.2 link state Down): LinkDownedCounter, packets
    /// on the wire are lost (epoch), credits are void until retraining, requests from switch
    /// inputs for this output are discarded. An HCA keeps its send queue for when the link
    /// returns.
    pub(super) fn link_down(&mut self, q: u32) {
        let now = self.now;
        let p = &mut self.ports[q as usize];
        p.close_waits(now);
        p.link_up = false;
        p.epoch = p.epoch.wrapping_add(1);
        p.counters.link_downed_counter += 1;
        p.fc_pending = 0;
        // What is still on the wire towards this port is lost too: its items carry the old
        // epoch and are skipped when they come due.
        for v in &mut p.vls[..DATA_VLS] {
            v.tx = crate::credits::TxCredits::new();
            v.in_flight.clear();
            v.in_flight_blocks = 0;
        }
        if p.switch.is_none() {
            return;
        }
        for v in 0..16u8 {
            while let Some(src) = self.ports[q as usize].vls[v as usize].out_q.pop_front() {
                self.ports[q as usize].queued -= 1;
                if let Source::Input { port, vl } = src {
                    let blocks = {
                        let head = *self.ports[port as usize].vls[vl as usize]
                            .in_q
                            .front()
                            .expect("requesting input has a head");
                        self.pool.get(head).meta.blocks
                    };
                    self.discard_head(port, vl, q, v, blocks);
                    // Its next head requests (or is discarded) in turn.
                    self.request_head(port, vl);
                }
            }
        }
        self.ports[q as usize].nonempty = 0;
    }

    /// The link of port `q` comes back: credits are re-initialised and advertised afresh
    /// (IBA 7.9.4.1), the send queues resume.
    pub(super) fn link_up(&mut self, q: u32) {
        let p = &mut self.ports[q as usize];
        p.link_up = true;
        for v in &mut p.vls[..DATA_VLS] {
            v.rx.reset_abr();
        }
        p.fc_pending = p.data_vl_mask();
        self.kicks.push_back(q);
    }
}
