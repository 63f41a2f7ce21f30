//! `softib sim SCENARIO --serve` and `--replay`: the scenario is run to its end (or to
//! `--serve-at`), the fabric is frozen there, and its node agents answer the MADs of stock
//! tools run under `ibsim-run` (softib_sim::serve); `--replay` answers a MAD log again and
//! checks every response bit for bit.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use softib_fabric::agents::Subnet;
use softib_fabric::time::Picos;
use softib_sim::report::run::{run_and_keep, RunOptions};
use softib_sim::serve::{mad_log, Server, SmRun, Transport};

use crate::sim::{emit, load, options, out_dir, SimArgs};

/// What `--serve` serves: the scenario's name, the subnet, and the run that follows an
/// external SM's bring-up or a congestion control Set.
struct ToServe {
    name: String,
    subnet: Subnet,
    run: Option<SmRun>,
}

/// Runs the scenario of `args` to the serving instant `at` and returns the frozen subnet;
/// or, with an external SM (`[subnet_manager] external = true`), the fabric held at time 0
/// as it powers up, and the run to `at` that starts once the SM has brought every port up.
fn frozen(args: &SimArgs, at: Option<Picos>) -> Result<ToServe> {
    let l = load(args.scenario.as_deref(), args.seed, &args.set)?;
    // The run with an SM's tables and CC settings: after an external SM's bring-up, and
    // again after a congestion control Set (softib_sim::serve).
    let (scenario, name, opts) = (l.scenario.clone(), l.name.clone(), options(args));
    let run: SmRun = Box::new(move |program| {
        let opts = RunOptions {
            program: Some(program),
            ..opts.clone()
        };
        run_and_keep(&scenario, &name, &opts, at, &mut |_, _| {})
            .map(|(_, fabric)| Subnet::snapshot(&fabric))
            .map_err(|e| e.to_string())
    });
    if let Some(host) = l.scenario.external_sm_host()? {
        let fabric = l
            .scenario
            .build()
            .with_context(|| format!("building {}", l.name))?;
        let mut subnet = Subnet::unconfigured(&fabric);
        subnet.sm_host = Some(host);
        return Ok(ToServe {
            name: l.name,
            subnet,
            run: Some(run),
        });
    }
    let (_, fabric) = run_and_keep(&l.scenario, &l.name, &options(args), at, &mut |_, _| {})
        .with_context(|| format!("running {}", l.name))?;
    Ok(ToServe {
        name: l.name,
        subnet: Subnet::snapshot(&fabric),
        run: Some(run),
    })
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
        // A log of a fabric held for an external SM says where its run stopped.
        let ran_to = log.entries.iter().find_map(|e| match e {
            mad_log::Entry::Ran { at_ps } => Some(*at_ps),
            _ => None,
        });
        let ToServe {
            name,
            mut subnet,
            run,
        } = frozen(args, ran_to.or(Some(log.at_ps)))?;
        if name != log.scenario {
            bail!(
                "{} was served from scenario `{}`, not `{name}`",
                path.display(),
                log.scenario
            );
        }
        let mut run = run.unwrap_or_else(|| {
            Box::new(|_| Err("this scenario has no external subnet manager".into()))
        });
        let r = mad_log::replay(&mut subnet, &log, &mut run);
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
    let ToServe { name, subnet, run } = frozen(args, at)?;
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
    let held = subnet.sm_host.map(|h| subnet.nodes[h].name.clone());
    let server = Server::bind(subnet, &transport, &name, log, run).with_context(|| match args.udp_port {
        Some(p) => format!("cannot bind UDP 127.0.0.1 ports {p}..{} (in use?)", p as u32 + 10),
        None => format!(
            "cannot bind the abstract sockets {0}:ctl, {0}:out0..9 (another server running? try --sock-name)",
            args.sock_name
        ),
    })?;
    let state = match &held {
        Some(h) => format!(
            "held at 0 us for an external SM on {h}: ports in Init, no LIDs; the run starts when every port is Active and the SM is done"
        ),
        None => format!("frozen at {at_us} us"),
    };
    emit(&format!(
        "softib sim: serving {name} {state} ({hcas} HCAs, {switches} switches) on {}{}{}\n",
        match args.udp_port {
            Some(p) => format!("UDP 127.0.0.1:{p}"),
            None => format!("{}:ctl", args.sock_name),
        },
        match args.udp_port {
            Some(p) =>
                format!(" (run tools with IBSIM_SERVER_NAME=127.0.0.1 IBSIM_SERVER_PORT={p})"),
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
