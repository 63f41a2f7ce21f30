//! One perftest-style tool from start to end: set up the session, run the bandwidth or the
//! latency loop over it, publish the outcome. Apart from `mod.rs` (the session and the
//! parameters `bw.rs` and `lat.rs` use), so the loops do not import their caller.

use super::{bw, establish, lat, Conn, Kind, Params, PerfArgs, Verb};

/// Runs one perftest-style tool.
pub fn run(verb: Verb, kind: Kind, tool: &str, args: &PerfArgs) -> anyhow::Result<()> {
    let mut p = Params::new(verb, kind, tool, args)?;
    let mut s = establish(&p, args)?;
    if p.conn == Conn::Ud {
        // -a on UD runs the sizes that fit one packet (perftest does the same).
        p.sizes.retain(|&z| z <= u64::from(s.mtu.bytes()));
    }
    let result = match kind {
        Kind::Bw => bw::run(&mut s, &p),
        Kind::Lat => lat::run(&mut s, &p),
    };
    s.disconnect();
    let state = if result.is_ok() { "finished" } else { "failed" };
    let published = s.publisher.write(&s.ctx, state);
    result?;
    published
}
