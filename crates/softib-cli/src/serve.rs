//! `softib sim SCENARIO --serve` and `--replay`: the scenario is run to its end (or to
//! `--serve-at`), the fabric is frozen there, and its node agents answer the MADs of stock
//! tools run under `ibsim-run` (softib_sim::serve); `--replay` answers a MAD log again and
//! checks every response bit for bit.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use softib_fabric::agents::Subnet;
use softib_fabric::time::Picos;
use softib_sim::report::run::run_and_keep;
use softib_sim::serve::{mad_log, Server, Transport};

use crate::sim::{emit, load, options, out_dir, SimArgs};

/// Runs the scenario of `args` to the serving instant and returns the frozen subnet.
fn frozen(args: &SimArgs, at: Option<Picos>) -> Result<(String, Subnet)> {
    let l = load(args.scenario.as_deref(), args.seed, &args.set)?;
    let (_, fabric) = run_and_keep(&l.scenario, &l.name, &options(args), at, &mut |_, _| {})
        .with_context(|| format!("running {}", l.name))?;
    Ok((l.name, Subnet::snapshot(&fabric)))
}

fn micros_to_ps(us: f64) -> Result<Picos> {
    if !us.is_finite() || us < 0.0 {
        bail!("--serve-at must be a time in microseconds >= 0, not {us}");
    }
    Ok((us * 1e6).round() as Picos)
}

/// `softib sim --serve` / `--replay`.
pub fn run(args: &SimArgs) -> Result<()> {
    if let Some(path) = &args.replay {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read MAD log {}", path.display()))?;
        let log =
            mad_log::parse(&text).map_err(|e| anyhow::anyhow!("in {}: {e}", path.display()))?;
        let (name, mut subnet) = frozen(args, Some(log.at_ps))?;
        if name != log.scenario {
            bail!(
                "{} was served from scenario `{}`, not `{name}`",
                path.display(),
                log.scenario
            );
        }
        let r = mad_log::replay(&mut subnet, &log);
        emit(&format!(
            "replayed {} MADs of {} against {name} at {} us: {} identical\n",
            r.replayed,
            path.display(),
            log.at_ps as f64 / 1e6,
            r.identical
        ))?;
        for (line, what) in &r.differences {
            emit(&format!("  line {line}: {what}\n"))?;
        }
        if r.identical != r.replayed {
            bail!(
                "{} of {} responses differ",
                r.replayed - r.identical,
                r.replayed
            );
        }
        return Ok(());
    }
    let at = args.serve_at.map(micros_to_ps).transpose()?;
    let (name, subnet) = frozen(args, at)?;
    let log_path: Option<PathBuf> = args
        .mad_log
        .clone()
        .or_else(|| out_dir(args, &name).map(|d| d.join("mads.log")));
    let log: Option<Box<dyn std::io::Write + Send>> = match &log_path {
        Some(p) => {
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            Some(Box::new(std::fs::File::create(p).with_context(|| {
                format!("cannot create MAD log {}", p.display())
            })?))
        }
        None => None,
    };
    let (hcas, switches) = (
        subnet.topology.hcas().count(),
        subnet.topology.switches().count(),
    );
    let at_us = subnet.at as f64 / 1e6;
    let transport = match args.udp_port {
        Some(p) => Transport::Udp(p),
        None => Transport::Abstract(args.sock_name.clone()),
    };
    let server = Server::bind(subnet, &transport, &name, log).with_context(|| match args.udp_port {
        Some(p) => format!("cannot bind UDP 127.0.0.1 ports {p}..{} (in use?)", p as u32 + 10),
        None => format!(
            "cannot bind the abstract sockets {0}:ctl, {0}:out0..9 (another server running? try --sock-name)",
            args.sock_name
        ),
    })?;
    emit(&format!(
        "softib sim: serving {name} frozen at {at_us} us ({hcas} HCAs, {switches} switches) on {}{}{}\n",
        match args.udp_port {
            Some(p) => format!("UDP 127.0.0.1:{p}"),
            None => format!("{}:ctl", args.sock_name),
        },
        match args.udp_port {
            Some(p) => format!(" (run tools with IBSIM_SERVER_NAME=127.0.0.1 IBSIM_SERVER_PORT={p})"),
            None if args.sock_name == "sim" => String::new(),
            None => format!(" (run tools with IBSIM_SOCKNAME={})", args.sock_name),
        },
        log_path
            .map(|p| format!("; MAD log {}", p.display()))
            .unwrap_or_default()
    ))?;
    server.serve().context("serving")?;
    Ok(())
}
